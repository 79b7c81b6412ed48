// The dashboard's pages: each chart's Plotly figure is in the page's JSON block (#page-data);
// this hands them to Plotly.js, which draws them. A point's x is its commit's key in the
// page's commit table: a trace whose hover names its customdata gets [id, short id, date,
// subject] of each point's commit there; a click on a point opens its commit through
// --commit-url. Sparklines are static and drawn a few at a
// time (the page answers at once); each chart's div gets data-drawn once drawn.
(function () {
  "use strict";
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const commits = page.commits || {};

  function withCommits(figure) {
    for (const trace of figure.data) {
      if (String(trace.hovertemplate || "").includes("customdata")) {
        trace.customdata = trace.x.map((p) => commits[p] || [String(p), String(p), "", ""]);
      }
    }
    return figure;
  }

  function draw(div) {
    const figure = withCommits(page.charts[div.dataset.chart]);
    const spark = div.classList.contains("spark");
    const config = spark ? { staticPlot: true } : { displaylogo: false, responsive: true };
    return Plotly.newPlot(div, figure.data, figure.layout, config).then(() => {
      if (!spark && page.commitUrl) {
        div.on("plotly_click", (event) => {
          const point = event.points[0];
          if (point && Array.isArray(point.customdata)) window.open(page.commitUrl.replace("{commit}", point.customdata[0]), "_blank");
        });
      }
      div.dataset.drawn = "yes";
    });
  }

  const waiting = Array.from(document.querySelectorAll(".chart"));
  function next() {
    const batch = waiting.splice(0, 8);
    if (batch.length) Promise.all(batch.map(draw)).then(() => setTimeout(next, 0));
  }
  next();
})();
