"""`git sup demo` and the scripted model stand-ins it and the tests run on 127.0.0.1."""
