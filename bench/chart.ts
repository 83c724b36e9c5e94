// The latency chart, drawn as SVG by hand: the cumulative distribution of per-app convergence latency for each run
// (left), and each run's p50 / p95 / p99 / max beside its makespan and floor (right). A PNG is rendered from the SVG
// only when an SVG rasterizer (@resvg/resvg-js, prebuilt, no native build) happens to be installed.
import { writeFile } from 'node:fs/promises';
import { distribution } from './util.ts';

export interface Series {
  label: string;
  latenciesMs: number[];
  makespanMs: number;
  floorMs?: number;
}

const colors = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const s1 = (ms: number) => (ms >= 100_000 ? (ms / 1000).toFixed(0) : (ms / 1000).toFixed(1));

/** Axis ticks: linear (1-2-5 steps) or, for a log axis, the 1-2-5 values inside [lo, hi]. */
function ticks(lo: number, hi: number, log: boolean): number[] {
  const out: number[] = [];
  if (log) {
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) {
        const v = m * 10 ** e;
        if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
      }
    }
    return out;
  }
  const raw = (hi - lo) / 6;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? raw;
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(Number(v.toPrecision(6)));
  return out;
}

export function latencyChartSvg(series: Series[], title: string, subtitle: string): string {
  const W = 1200;
  const rowH = 34;
  const H = Math.max(560, 170 + series.length * rowH + 120);
  const pad = { l: 70, t: 80, b: 60 };
  const plotW = 560;
  const plotH = H - pad.t - pad.b;
  const all = series.flatMap((s) => s.latenciesMs).filter((v) => v > 0);
  const maxMs = Math.max(1000, ...all, ...series.map((s) => s.makespanMs));
  const minMs = Math.max(50, Math.min(...all, maxMs));
  const log = maxMs / minMs > 20;
  const lo = log ? 10 ** Math.floor(Math.log10(minMs / 1000)) : 0;
  const hi = log ? maxMs / 1000 * 1.05 : maxMs / 1000 * 1.05;
  const x = (sec: number) => pad.l + (log ? (Math.log10(Math.max(sec, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : (sec - lo) / (hi - lo)) * plotW;
  const y = (frac: number) => pad.t + (1 - frac) * plotH;

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${pad.l}" y="30" font-size="18" font-weight="bold">${esc(title)}</text>`);
  out.push(`<text x="${pad.l}" y="52" fill="#555">${esc(subtitle)}</text>`);

  // Left: CDF.
  out.push(`<g stroke="#ddd">`);
  for (const f of [0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1]) out.push(`<line x1="${pad.l}" x2="${pad.l + plotW}" y1="${y(f).toFixed(1)}" y2="${y(f).toFixed(1)}"/>`);
  for (const t of ticks(lo || 0, hi, log)) out.push(`<line x1="${x(t).toFixed(1)}" x2="${x(t).toFixed(1)}" y1="${pad.t}" y2="${pad.t + plotH}"/>`);
  out.push(`</g>`);
  out.push(`<rect x="${pad.l}" y="${pad.t}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`);
  for (const f of [0, 0.25, 0.5, 0.75, 1]) out.push(`<text x="${pad.l - 8}" y="${(y(f) + 4).toFixed(1)}" text-anchor="end" font-size="11">${Math.round(f * 100)}%</text>`);
  // p90 / p95 / p99 are close together near the top: labelled inside the plot, at the right edge.
  for (const [f, dy] of [[0.9, 12], [0.95, 4], [0.99, -3]] as const) {
    out.push(`<text x="${pad.l + plotW - 4}" y="${(y(f) + dy).toFixed(1)}" text-anchor="end" font-size="9" fill="#888">p${Math.round(f * 100)}</text>`);
  }
  for (const t of ticks(lo || 0, hi, log)) out.push(`<text x="${x(t).toFixed(1)}" y="${pad.t + plotH + 18}" text-anchor="middle" font-size="11">${t}</text>`);
  out.push(`<text x="${pad.l + plotW / 2}" y="${pad.t + plotH + 40}" text-anchor="middle">latency from create to converged, s${log ? ' (log scale)' : ''}</text>`);
  out.push(`<text transform="translate(18 ${pad.t + plotH / 2}) rotate(-90)" text-anchor="middle">apps converged (cumulative)</text>`);
  series.forEach((s, i) => {
    const c = colors[i % colors.length]!;
    const v = [...s.latenciesMs].sort((a, b) => a - b);
    if (v.length === 0) return;
    const pts: string[] = [`${x(v[0]! / 1000).toFixed(1)},${y(0).toFixed(1)}`];
    const stride = Math.max(1, Math.floor(v.length / 800));
    for (let k = 0; k < v.length; k += stride) pts.push(`${x(v[k]! / 1000).toFixed(1)},${y((k + 1) / v.length).toFixed(1)}`);
    pts.push(`${x(v[v.length - 1]! / 1000).toFixed(1)},${y(1).toFixed(1)}`);
    out.push(`<polyline fill="none" stroke="${c}" stroke-width="2" points="${pts.join(' ')}"/>`);
  });

  // Right: one row per run with p50-p95 bar, p99 tick, max dot, makespan diamond and floor line.
  const rx = pad.l + plotW + 60;
  const rw = W - rx - 30;
  const rmax = maxMs / 1000 * 1.05;
  const sx = (sec: number) => rx + (log ? (Math.log10(Math.max(sec, lo)) - Math.log10(lo)) / (Math.log10(rmax) - Math.log10(lo)) : sec / rmax) * rw;
  out.push(`<text x="${rx}" y="${pad.t - 10}" font-weight="bold">per run: p50–p95 bar, p99 |, max ●, makespan ◆, floor ┆</text>`);
  series.forEach((s, i) => {
    const c = colors[i % colors.length]!;
    const d = distribution(s.latenciesMs);
    const top = pad.t + 10 + i * rowH * 2.2;
    out.push(`<text x="${rx}" y="${top}" fill="${c}" font-weight="bold">${esc(s.label)}</text>`);
    if (!d) return;
    const mid = top + 18;
    out.push(`<line x1="${rx}" x2="${rx + rw}" y1="${mid}" y2="${mid}" stroke="#eee"/>`);
    out.push(`<rect x="${sx(d.p50 / 1000).toFixed(1)}" y="${mid - 7}" width="${Math.max(2, sx(d.p95 / 1000) - sx(d.p50 / 1000)).toFixed(1)}" height="14" fill="${c}" opacity="0.6"/>`);
    out.push(`<line x1="${sx(d.p99 / 1000).toFixed(1)}" x2="${sx(d.p99 / 1000).toFixed(1)}" y1="${mid - 10}" y2="${mid + 10}" stroke="${c}" stroke-width="2"/>`);
    out.push(`<circle cx="${sx(d.max / 1000).toFixed(1)}" cy="${mid}" r="4" fill="${c}"/>`);
    const mk = sx(s.makespanMs / 1000);
    out.push(`<path d="M ${mk.toFixed(1)} ${mid - 6} l 6 6 l -6 6 l -6 -6 z" fill="none" stroke="#333"/>`);
    if (s.floorMs) {
      const fx = sx(s.floorMs / 1000).toFixed(1);
      out.push(`<line x1="${fx}" x2="${fx}" y1="${mid - 12}" y2="${mid + 12}" stroke="#333" stroke-dasharray="3,2"/>`);
    }
    const floor = s.floorMs ? `, floor ${s1(s.floorMs)}` : '';
    out.push(`<text x="${rx}" y="${mid + 26}" font-size="11" fill="#333">p50 ${s1(d.p50)} · p95 ${s1(d.p95)} · p99 ${s1(d.p99)} · max ${s1(d.max)} · makespan ${s1(s.makespanMs)}${floor} s (n=${d.count})</text>`);
  });
  const axisY = pad.t + 10 + series.length * rowH * 2.2 + 10;
  out.push(`<line x1="${rx}" x2="${rx + rw}" y1="${axisY}" y2="${axisY}" stroke="#333"/>`);
  for (const t of ticks(lo || 0, rmax, log)) {
    out.push(`<line x1="${sx(t).toFixed(1)}" x2="${sx(t).toFixed(1)}" y1="${axisY}" y2="${axisY + 4}" stroke="#333"/>`);
    out.push(`<text x="${sx(t).toFixed(1)}" y="${axisY + 17}" text-anchor="middle" font-size="11">${t}</text>`);
  }
  out.push(`<text x="${rx + rw / 2}" y="${axisY + 36}" text-anchor="middle">seconds</text>`);
  out.push('</svg>');
  return out.join('\n');
}

/** Writes the SVG, and a PNG beside it when an SVG rasterizer is installed; returns the files written and a note. */
export async function writeChart(svgPath: string, svg: string): Promise<{ files: string[]; note?: string }> {
  await writeFile(svgPath, svg);
  const files = [svgPath];
  const pngPath = svgPath.replace(/\.svg$/, '.png');
  try {
    const name = '@resvg/resvg-js';
    const mod = await import(name);
    const resvg = new mod.Resvg(svg, { background: 'white', font: { loadSystemFonts: true } });
    await writeFile(pngPath, resvg.render().asPng());
    files.push(pngPath);
    return { files };
  } catch (err) {
    const missing = (err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND';
    return { files, note: missing ? 'PNG skipped: @resvg/resvg-js is not installed (SVG written)' : `PNG skipped: ${(err as Error).message}` };
  }
}
