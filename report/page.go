package report

// pageHTML is the HTML report's template: inline CSS, inline SVG, a small
// inline script that sorts the table. Nothing is fetched.
const pageHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>memplan capacity report</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px 32px;color:#1f2933;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dee4;padding-bottom:4px}
.meta{color:#52606d;margin-bottom:12px}.charts{display:flex;flex-wrap:wrap;gap:14px}
.chart{background:#fff;border:1px solid #e4e7eb;border-radius:6px;padding:6px}
.ct{font-weight:600;font-size:13px}.lb{font-size:12px;text-anchor:end}.v{font-size:11px;fill:#3e4c59}
.err{font-size:12px;fill:#c81e1e}.el{font-size:10px;fill:#52606d}.edge{stroke:#52606d;stroke-dasharray:3 3}
.legend span{display:inline-block;margin-right:12px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
table{border-collapse:collapse;background:#fff;margin-top:8px;font-size:13px}th,td{border:1px solid #e4e7eb;padding:4px 8px}
th{background:#f0f4f8;cursor:pointer;user-select:none;text-align:left}td:nth-child(2){white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{color:#c81e1e}.rowerr{color:#c81e1e;font-weight:600}
</style></head><body>
<h1>memplan capacity report</h1>
<div class="meta">Target {{pct .Band.Lo}}–{{pct .Band.Hi}}% of device memory, less a {{pct .Margin}}% safety margin ·
memplan {{.Version}} · generated {{date .}}</div>
<div class="legend">{{range segments}}<span><i style="background:{{.Color}}"></i>{{.Name}}</span>{{end}}</div>
{{range .Rows}}<section class="spec"><h2>{{.Spec}}</h2>
{{if .Error}}<p class="rowerr">error: {{.Error}}</p>{{else}}<div class="charts">{{fillChart $ .}}{{batchChart .}}{{breakdownChart .}}</div>{{end}}
</section>{{end}}
<h2>All cells</h2>
<table id="cells"><thead><tr><th>spec</th><th>device</th><th>batch</th><th>fill %</th><th>verdict</th><th>largest batch</th><th>GPUs</th><th>layout</th><th>$/hour</th><th>error</th></tr></thead>
<tbody>{{range $row := .Rows}}{{range .Cells}}<tr class="cell{{if .Error}} fail{{end}}"><td>{{$row.Spec}}</td><td>{{.Device}}</td><td class="n">{{.Batch}}</td><td class="n">{{pct .Fill}}</td><td>{{.Verdict}}</td><td class="n">{{.MaxBatch}}</td><td class="n">{{.GPUs}}</td><td>{{.Layout}}</td><td class="n">{{cost .}}</td><td>{{.Error}}</td></tr>{{end}}{{end}}</tbody></table>
<script>
document.querySelectorAll("#cells th").forEach(function(th, i){
  th.addEventListener("click", function(){
    var tb = th.closest("table").tBodies[0], rows = Array.from(tb.rows);
    var asc = th.dataset.asc !== "1"; th.dataset.asc = asc ? "1" : "0";
    rows.sort(function(a, b){
      var x = a.cells[i].textContent, y = b.cells[i].textContent, nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    });
    rows.forEach(function(r){ tb.appendChild(r); });
  });
});
</script>
</body></html>
`
