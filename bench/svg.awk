# Bar chart of bench/run.sh's results.csv as SVG (no dependencies but awk).
#   awk -F, -v title="..." -f bench/svg.awk results.csv > chart.svg
# One panel per scenario x workload (a row per scenario), one bar per target, MB/s. Each panel
# has its own scale (4k random reads on the HDD pair and 1M reads on the SSD differ by 100x);
# the dashed line is leg1 read directly, the reference the ratios use.

function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); return s }
function colour(kind) { return kind == "direct" ? "#8c8c8c" : (kind == "btrfs" ? "#e07b24" : "#2f6db3") }

BEGIN { np = 0; nsc = 0; maxbars = 0; maxcols = 0 }
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
{
    sc = $col["scenario"]; wl = $col["workload"]
    if (!(sc in srow)) { srow[sc] = nsc++; sname[srow[sc]] = sc }
    key = sc SUBSEP wl
    if (!(key in pidx)) {
        r = srow[sc]; c = ncol[r]++
        pidx[key] = np; prow[np] = r; pcol[np] = c; pname[np] = sc " · " wl; np++
    }
    p = pidx[key]
    v = ($col["status"] == "ok") ? $col["MBps"] + 0 : 0
    b = nb[p]++
    bt[p, b] = $col["target"]; bv[p, b] = v; bk[p, b] = $col["kind"]; bok[p, b] = ($col["status"] == "ok")
    if (v > pmax[p]) pmax[p] = v
    if ($col["target"] == "direct:leg1" && $col["status"] == "ok") pref[p] = v
    if (nb[p] > maxbars) maxbars = nb[p]
    if (ncol[srow[sc]] > maxcols) maxcols = ncol[srow[sc]]
}
END {
    BW = 30; PH = 170; TOP = 50; LAB = 120
    PW = 50 + maxbars * BW; PHT = TOP + PH + LAB
    W = 20 + maxcols * (PW + 20); H = 70 + nsc * PHT + 10
    if (W < 960) W = 960
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"10\">\n", W, H
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
    printf "<text x=\"20\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", esc(title)
    lx = 20; ly = 46
    split("direct:leg read directly|btrfs:btrfs raid1 (kernel anchor)|mirrorfs:mirrorfs policy", leg, "|")
    for (i = 1; i <= 3; i++) {
        split(leg[i], kv, ":")
        printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx, ly - 10, colour(kv[1])
        printf "<text x=\"%d\" y=\"%d\">%s</text>\n", lx + 16, ly, esc(kv[2])
        lx += 190
    }
    printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" stroke-dasharray=\"4,3\"/>", lx, ly - 4, lx + 24, ly - 4
    printf "<text x=\"%d\" y=\"%d\">leg1 read directly (MB/s, each panel to its own scale)</text>\n", lx + 30, ly
    for (p = 0; p < np; p++) {
        x0 = 20 + pcol[p] * (PW + 20); y0 = 60 + prow[p] * PHT
        base = y0 + TOP + PH
        max = pmax[p] > 0 ? pmax[p] * 1.1 : 1
        printf "<g>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#dddddd\"/>\n", x0, y0, PW, PHT - 10
        printf "<text x=\"%d\" y=\"%d\" font-size=\"12\" font-weight=\"bold\">%s (MB/s)</text>\n", x0 + 8, y0 + 18, esc(pname[p])
        printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", x0 + 25, base, x0 + PW - 10, base
        for (b = 0; b < nb[p]; b++) {
            bx = x0 + 30 + b * BW
            h = bv[p, b] / max * PH
            printf "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"><title>%s: %.1f MB/s</title></rect>\n", bx, base - h, BW - 6, h, colour(bk[p, b]), esc(bt[p, b]), bv[p, b]
            lbl = bok[p, b] ? sprintf("%.0f", bv[p, b]) : "fail"
            if (bok[p, b] && bv[p, b] < 10) lbl = sprintf("%.1f", bv[p, b])
            printf "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%s</text>\n", bx + (BW - 6) / 2, base - h - 3, lbl
            printf "<text transform=\"translate(%.1f,%d) rotate(-55)\" text-anchor=\"end\" font-size=\"9\">%s</text>\n", bx + (BW - 6) / 2 + 3, base + 8, esc(bt[p, b])
        }
        if (p in pref) {
            ry = base - pref[p] / max * PH
            printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"4,3\"/>\n", x0 + 25, ry, x0 + PW - 10, ry
        }
        printf "</g>\n"
    }
    printf "</svg>\n"
}
