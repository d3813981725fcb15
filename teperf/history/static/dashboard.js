// teperf nightly dashboard: draws every chart whose figure is embedded as JSON in the page.
// No inline script (the page's Content-Security-Policy forbids it) and nothing fetched: the
// figures are data blocks (<script type="application/json">), plotly.js is a local file.
(function () {
  "use strict";
  window.teperfCharts = { rendered: 0, failed: 0, errors: [] };
  function draw() {
    var holders = document.querySelectorAll("div.chart[data-figure]");
    holders.forEach(function (div) {
      try {
        var block = document.getElementById(div.getAttribute("data-figure"));
        var fig = JSON.parse(block.textContent);
        Plotly.newPlot(div, fig.data, fig.layout, { responsive: true, displaylogo: false })
          .then(function () { window.teperfCharts.rendered += 1; })
          .catch(function (err) { window.teperfCharts.failed += 1; window.teperfCharts.errors.push(String(err)); console.error(err); });
      } catch (err) {
        window.teperfCharts.failed += 1;
        window.teperfCharts.errors.push(String(err));
        console.error(err);
      }
    });
    window.teperfCharts.expected = holders.length;
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
