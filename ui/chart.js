// A small line chart on a <canvas>: time on x, values on y, one line per series.
// series: [{ label, color, dash (optional, e.g. [6, 4]), points: [[tMs, value], ...] }]; the canvas is redrawn whole.
function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmt(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(1) + 'k';
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

export function drawChart(canvas, series, windowMs) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = Math.max(1, Math.round(w * dpr));
  canvas.height = Math.max(1, Math.round(h * dpr));
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const style = getComputedStyle(canvas);
  const fontPx = parseFloat(style.fontSize) || 14;
  g.font = `${fontPx * 0.8}px system-ui, sans-serif`;
  const left = fontPx * 3.5, bottom = fontPx * 1.6, top = fontPx * 0.6, right = fontPx * 0.6;
  // the window grows with the data from 30 s up to windowMs, so a young page shows
  // its few points spread out rather than squeezed against the right edge
  const now = Date.now();
  let first = now;
  for (const s of series) if (s.points.length) first = Math.min(first, s.points[0][0]);
  windowMs = Math.min(windowMs, Math.max(30000, now - first));
  const t0 = now - windowMs;
  let max = 0;
  for (const s of series) for (const [, v] of s.points) max = Math.max(max, v);
  max = niceMax(max);
  const x = (t) => left + ((t - t0) / windowMs) * (w - left - right);
  const y = (v) => h - bottom - (v / max) * (h - bottom - top);
  g.strokeStyle = '#d0d7de';
  g.fillStyle = '#57606a';
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4, yy = y(v);
    g.beginPath(); g.moveTo(left, yy); g.lineTo(w - right, yy); g.stroke();
    g.fillText(fmt(v), 2, yy + fontPx * 0.3);
  }
  const span = windowMs >= 60000 ? `-${Math.round(windowMs / 60000)} min` : `-${Math.round(windowMs / 1000)} s`;
  g.fillText(span, left, h - fontPx * 0.3);
  g.fillText('now', w - right - fontPx * 1.8, h - fontPx * 0.3);
  for (const s of series) {
    g.strokeStyle = s.color;
    g.lineWidth = 2;
    g.setLineDash(s.dash || []); // not by colour alone: a dashed line reads in grey too
    g.beginPath();
    let started = false;
    for (const [t, v] of s.points) {
      if (t < t0) continue;
      if (!started) { g.moveTo(x(t), y(v)); started = true; } else g.lineTo(x(t), y(v));
    }
    g.stroke();
  }
  canvas.setAttribute('aria-label', series.map((s) => {
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    return `${s.label}: ${fmt(last)} now`;
  }).join('; '));
}
