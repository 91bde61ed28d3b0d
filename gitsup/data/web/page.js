// gitsup serve: live updates over server-sent events, and the page's actions as JSON POSTs
// to /api/ (with the page's CSRF token). Text from the server is only ever set as text.
"use strict";

(function () {
  const csrf = document.querySelector('meta[name="gitsup-csrf"]').content;
  const page = document.body.dataset.page;
  const task = document.body.dataset.task;

  function cell(text, cls) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    return td;
  }

  function row(r) {
    const tr = document.createElement("tr");
    tr.id = "row-" + r.id;
    tr.dataset.state = r.state;
    if (r.attention.length) tr.className = "attention";
    const link = document.createElement("td");
    const a = document.createElement("a");
    a.href = "/task/" + encodeURIComponent(r.id);
    a.textContent = r.id;
    link.appendChild(a);
    tr.appendChild(link);
    const st = document.createElement("td");
    const badge = document.createElement("span");
    badge.className = "badge " + r.status;
    badge.textContent = r.status;
    st.appendChild(badge);
    tr.appendChild(st);
    tr.appendChild(cell(r.state, "state"));
    tr.appendChild(cell(String(r.turns)));
    tr.appendChild(cell("$" + Number(r.cost_usd).toFixed(4)));
    tr.appendChild(cell(r.attention.join("; "), "warn needs"));
    tr.appendChild(cell(r.goal, "goal"));
    return tr;
  }

  // What a row shows: a row is redrawn only when this changes; the table only when the
  // order of the tasks does.
  const shown = new Map();
  let order = null;

  function renderRows(rows) {
    const body = document.querySelector("#tasks tbody");
    if (!body) return;
    const now = rows.map((r) => r.id).join(" ");
    const keyOf = (r) => JSON.stringify([r.state, r.status, r.turns, r.cost_usd, r.attention, r.goal]);
    if (now === order) {
      for (const r of rows) {
        const key = keyOf(r);
        if (shown.get(r.id) === key) continue;
        shown.set(r.id, key);
        const old = document.getElementById("row-" + r.id);
        if (old) old.replaceWith(row(r));
      }
    } else {
      const fresh = document.createDocumentFragment();
      for (const r of rows) {
        shown.set(r.id, keyOf(r));
        fresh.appendChild(row(r));
      }
      body.replaceChildren(fresh);
      order = now;
    }
    const need = rows.filter((r) => r.attention.length).length;
    document.getElementById("counts").textContent =
      rows.length + " task(s), " + need + " need a human";
  }

  function editing() {
    const f = document.activeElement;
    return !!(f && (f.tagName === "INPUT" || f.tagName === "TEXTAREA") && f.value);
  }

  let busy = 0; // actions waiting for their answer: the page is not reloaded under them
  let changed = false;

  function taskChanged(rows) {
    // The page shows one state and status: a change of either brings the page up to date
    // (or, while something is being typed, says so).
    const mine = rows.find((r) => r.id === task);
    const badge = document.getElementById("status");
    if (!mine || !badge) return;
    if (badge.dataset.state === mine.state && badge.dataset.status === mine.status) return;
    if (busy) {
      changed = true;
    } else if (editing()) {
      const live = document.getElementById("live");
      live.textContent = "this task changed: ";
      const a = document.createElement("a");
      a.href = location.pathname;
      a.textContent = "reload";
      live.appendChild(a);
      live.hidden = false;
    } else {
      location.reload();
    }
  }

  if (window.EventSource) {
    const source = new EventSource("/events");
    source.addEventListener("rows", (ev) => {
      const rows = JSON.parse(ev.data);
      if (page === "index") renderRows(rows);
      else if (page === "task") taskChanged(rows);
    });
  }

  // A click on a line of the diff (its new side) starts a comment on that line.
  const commentForm = document.getElementById("comment-form");
  if (commentForm) {
    for (const span of document.querySelectorAll(".diff span[data-line]")) {
      span.addEventListener("click", () => {
        const file = span.closest("details.file");
        if (!file) return;
        commentForm.elements.path.value = file.dataset.path;
        commentForm.elements.line.value = span.dataset.line;
        commentForm.elements.message.focus();
      });
    }
  }

  for (const form of document.querySelectorAll("form.action")) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
      const body = {};
      for (const [k, v] of new FormData(form)) body[k] = v;
      if (ev.submitter && ev.submitter.name) body[ev.submitter.name] = ev.submitter.value;
      if (form.dataset.action === "continue") {
        body.add_turns = Number(body.add_turns || 0);
        body.add_cost_usd = Number(body.add_cost_usd || 0);
      }
      const out = form.querySelector("output");
      out.textContent = "…";
      busy += 1;
      for (const b of form.querySelectorAll("button")) b.disabled = true;
      try {
        const resp = await fetch("/api/tasks/" + encodeURIComponent(task) + "/" + form.dataset.action, {
          method: "POST",
          headers: { "Content-Type": "application/json", "X-Gitsup-CSRF": csrf },
          body: JSON.stringify(body),
          credentials: "same-origin",
        });
        const got = await resp.json();
        out.textContent = resp.ok ? "done" : (got.error || resp.statusText) + (got.hint ? " (" + got.hint + ")" : "");
        out.className = resp.ok ? "ok" : "bad";
        form.dataset.result = resp.ok ? "ok" : "error";
      } catch (err) {
        out.textContent = String(err);
        out.className = "bad";
        form.dataset.result = "error";
      } finally {
        for (const b of form.querySelectorAll("button")) b.disabled = false;
        busy -= 1;
      }
      // Taken: the page shows the task as it is now (its answer stays shown if it failed).
      if (form.dataset.result === "ok" && (changed || form.dataset.action !== "message")) {
        window.setTimeout(() => location.reload(), 500);
      }
    });
  }
})();
