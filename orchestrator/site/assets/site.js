// orch site: what the pages do in the browser, and only that. Tables: sort by a header
// click, filter rows by text. Charts: Plotly draws the figure spec each page embeds as JSON
// (orch computed every number; nothing is computed here); a history point opens its session.
// Text is only ever set with textContent or given to Plotly already escaped.
(function () {
  "use strict";

  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) return "";
    var key = cell.getAttribute("data-sort");
    return key !== null ? key : cell.textContent.trim();
  }

  function compare(a, b) {
    var x = parseFloat(a.replace(/[,%+]/g, "")), y = parseFloat(b.replace(/[,%+]/g, ""));
    var numeric = /^[-+−]?[\d.,]+%?$/;
    if (numeric.test(a.replace("−", "-")) && numeric.test(b.replace("−", "-")) && !isNaN(x) && !isNaN(y)) {
      return x - y;
    }
    return a.localeCompare(b);
  }

  function sortable(table) {
    var head = table.tHead ? table.tHead.rows[0] : null;
    var body = table.tBodies[0];
    if (!head || !body) return;
    Array.prototype.forEach.call(head.cells, function (th, index) {
      th.classList.add("sort-key");
      th.addEventListener("click", function () {
        var ascending = !th.classList.contains("sorted-asc");
        Array.prototype.forEach.call(head.cells, function (other) {
          other.classList.remove("sorted-asc", "sorted-desc");
        });
        th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r1, r2) {
          var d = compare(cellValue(r1, index), cellValue(r2, index));
          return ascending ? d : -d;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  }

  function filterRows(text) {
    var wanted = text.trim().toLowerCase();
    document.querySelectorAll("main table tbody tr").forEach(function (row) {
      row.hidden = wanted !== "" && row.textContent.toLowerCase().indexOf(wanted) < 0;
    });
  }

  function draw(holder) {
    var source = document.getElementById(holder.getAttribute("data-chart"));
    if (!source || typeof Plotly === "undefined") return;
    var spec = JSON.parse(source.textContent);
    var options = {responsive: true, displaylogo: false};
    if (holder.classList.contains("js-plotly-plot")) {   // another metric: its handler stays
      Plotly.react(holder, spec.data, spec.layout, options);
      return;
    }
    Plotly.newPlot(holder, spec.data, spec.layout, options);
    holder.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      if (point && point.customdata) window.location.href = point.customdata;
    });
  }

  document.querySelectorAll("main table").forEach(sortable);
  document.querySelectorAll("input.row-filter").forEach(function (input) {
    input.addEventListener("input", function () { filterRows(input.value); });
  });
  document.querySelectorAll("div.chart[data-chart]").forEach(draw);
  // a chart offered in several metrics: each metric's figure is its own JSON element
  document.querySelectorAll("select.chart-choice").forEach(function (choice) {
    choice.addEventListener("change", function () {
      var holder = document.getElementById(choice.getAttribute("data-plot"));
      holder.setAttribute("data-chart", choice.value);
      draw(holder);
    });
  });
})();
