// Live task list: polls /tasks.json with the page's filters and rebuilds the rows with
// DOM text nodes (never HTML), so agent-supplied text stays text.
(function () {
  "use strict";
  var body = document.getElementById("task-rows");
  if (!body) { return; }
  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }
  function refresh() {
    fetch("/tasks.json" + window.location.search, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        var rows = document.createDocumentFragment();
        data.tasks.forEach(function (t) {
          var tr = document.createElement("tr");
          tr.setAttribute("data-task", t.task_id);
          cell(tr, (t.updated_at || "").slice(11, 19), "num");
          var st = cell(tr, "");
          var span = document.createElement("span");
          span.className = "state " + t.state;
          span.textContent = t.state;
          st.appendChild(span);
          var link = cell(tr, "");
          var a = document.createElement("a");
          a.href = "/tasks/" + encodeURIComponent(t.task_id);
          a.textContent = t.task_id;
          link.appendChild(a);
          cell(tr, t.text);
          cell(tr, t.client || "—");
          cell(tr, t.pending || "");
          rows.appendChild(tr);
        });
        body.replaceChildren(rows);
      })
      .catch(function () {});
  }
  setInterval(refresh, 2000);
})();
