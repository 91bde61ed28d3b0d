"""What needs a human (the attention fold) and telling them (notifications)."""
