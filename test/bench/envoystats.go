package main

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Envoy's request-time histograms count whole milliseconds, too coarse for sub-millisecond
// overheads; its counters are exact and say where extra work comes from: ext_proc messages and
// streams per request, and connections opened (to providers, to ext_proc, from clients).
const envoyCounterFilter = `^(http\.(public|bench)\.(ext_proc\..*|downstream_cx_total|downstream_rq_total)` +
	`|cluster\.(fake|provider\.fake|tollway_extproc)\.(upstream_cx_total|upstream_rq_total|upstream_rq_pending_total|upstream_cx_destroy_remote))$`

// envoyCounters reads the counters above from an Envoy admin socket; nil if there is none.
func envoyCounters(sock string) map[string]int64 {
	if sock == "" {
		return nil
	}
	body, err := adminGet(unixClient(sock), "/stats?usedonly&type=Counters&filter="+url.QueryEscape(envoyCounterFilter))
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, line := range strings.Split(body, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	return out
}

// counterDelta is one counter's growth over a measured window.
type counterDelta struct {
	name  string
	delta int64
}

func counterDeltas(before, after map[string]int64) []counterDelta {
	var out []counterDelta
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out = append(out, counterDelta{k, d})
		}
	}
	return out
}

// addDeltas sums two windows' deltas by counter.
func addDeltas(a, b []counterDelta) []counterDelta {
	for _, d := range b {
		if i := slices.IndexFunc(a, func(c counterDelta) bool { return c.name == d.name }); i >= 0 {
			a[i].delta += d.delta
		} else {
			a = append(a, d)
		}
	}
	return a
}
