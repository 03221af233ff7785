package admin

import (
	encsv "encoding/csv"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// usageDims are the ways usage can be grouped, in the order rows are sorted by default.
var usageDims = []string{"day", "account", "key", "model", "route"}

// defaultUsageDims group as `tollway usage` lists: one row per day, account, key and model.
var defaultUsageDims = []string{"day", "account", "key", "model"}

// usageFilter reads the filters every usage view shares (as GET /admin/v1/usage takes them).
func usageFilter(r *http.Request) (store.UsageFilter, error) {
	q := r.URL.Query()
	f := store.UsageFilter{KeyID: q.Get("key"), Account: q.Get("account"), Model: q.Get("model")}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.DateOnly, v)
			if err != nil {
				return f, faultf(p.name, "%s is not a date; send one like 2026-11-01 (UTC)", ir.QuoteShort(v))
			}
			*p.dst = t
		}
	}
	return f, nil
}

func parseDims(v string) ([]string, error) {
	if v == "" {
		return defaultUsageDims, nil
	}
	var out []string
	for _, d := range strings.Split(v, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(usageDims, d) {
			return nil, faultf("by", "%s is not a grouping; use a comma-separated list of %s", ir.QuoteShort(d), strings.Join(usageDims, ", "))
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// groupUsage folds usage into one row per distinct value of dims, sorted by them.
func groupUsage(dims []string, rows []store.RecordRow) ([]adminapi.GroupedRow, store.UsageTotals) {
	var total store.UsageTotals
	byKey := map[string]*adminapi.GroupedRow{}
	var order []string
	for _, r := range rows {
		vals := map[string]string{"day": r.Day, "account": r.Account, "key": r.KeyID, "model": r.Model, "route": r.Route}
		g := map[string]string{}
		parts := make([]string, len(dims))
		for i, d := range dims {
			g[d] = vals[d]
			parts[i] = vals[d]
		}
		k := strings.Join(parts, "\x00")
		row := byKey[k]
		if row == nil {
			row = &adminapi.GroupedRow{Group: g}
			byKey[k] = row
			order = append(order, k)
		}
		row.Add(r.UsageTotals)
		total.Add(r.UsageTotals)
	}
	sort.Strings(order)
	out := make([]adminapi.GroupedRow, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, total
}

// usageViewRoutes serve usage the way the console shows it.
func (s *api) usageViewRoutes(mux *http.ServeMux) {
	// GET /admin/v1/usage/grouped?by=day,model[&route=...][&key&account&model&since&until][&format=csv]:
	// usage grouped by any of day, account, key, model and route. Without route (as by or as a
	// filter) it sums the daily aggregates, the very numbers of `tollway usage`; with route it
	// sums the usage records (the aggregates have no route), which cover the retention window.
	mux.HandleFunc("GET /admin/v1/usage/grouped", func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r, "by", "key", "account", "model", "route", "since", "until", "format"); err != nil {
			writeErr(w, err)
			return
		}
		q := r.URL.Query()
		f, err := usageFilter(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		dims, err := parseDims(q.Get("by"))
		if err != nil {
			writeErr(w, err)
			return
		}
		format := q.Get("format")
		if format != "" && format != "json" && format != "csv" {
			writeErr(w, faultf("format", "%s: want json (the default) or csv", ir.QuoteShort(format)))
			return
		}
		route := q.Get("route")
		out := adminapi.GroupedUsage{By: dims, Since: q.Get("since"), Until: q.Get("until"), RecordsKeptDays: s.retentionDays()}
		var rows []store.RecordRow
		if route != "" || slices.Contains(dims, "route") {
			out.Source = "records"
			rows, err = s.store.UsageByRecords(f, route)
		} else {
			out.Source = "aggregates"
			var sum store.UsageSummary
			sum, err = s.store.Usage(f)
			for _, u := range sum.Rows {
				rows = append(rows, store.RecordRow{Day: u.Day, KeyID: u.KeyID, Account: u.Account, Model: u.Model, UsageTotals: u.UsageTotals})
			}
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		out.Rows, out.Totals = groupUsage(dims, rows)
		if format == "csv" {
			writeUsageCSV(w, out)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})

	// GET /admin/v1/usage/keys[?month=2026-11]: each key's spend in the month (UTC; what its
	// monthly limit counts) and when it was last used.
	mux.HandleFunc("GET /admin/v1/usage/keys", func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r, "month"); err != nil {
			writeErr(w, err)
			return
		}
		month := r.URL.Query().Get("month")
		if month == "" {
			month = time.Now().UTC().Format("2006-01")
		}
		if _, err := time.Parse("2006-01", month); err != nil || len(month) != 7 {
			writeErr(w, faultf("month", "%s is not a month; send one like 2026-11 (UTC)", ir.QuoteShort(month)))
			return
		}
		keys, err := s.store.Keys()
		if err != nil {
			writeErr(w, err)
			return
		}
		spend, err := s.store.MonthSpend(month)
		if err != nil {
			writeErr(w, err)
			return
		}
		last, err := s.store.KeysLastUsed(lastUsedScan)
		if err != nil {
			writeErr(w, err)
			return
		}
		type keyActivity struct {
			KeyID         string          `json:"key_id"`
			Spent         decimal.Decimal `json:"spent"`
			LastUsedAt    *time.Time      `json:"last_used_at"`
			LastUsedExact bool            `json:"last_used_exact"` // false: only the day is known (last_used_at is its start)
		}
		data := make([]keyActivity, 0, len(keys))
		for _, k := range keys {
			a := keyActivity{KeyID: k.ID, Spent: decimal.Zero}
			if sp, ok := spend[k.ID]; ok {
				a.Spent = sp
			}
			if lu, ok := last[k.ID]; ok {
				t := lu.Time
				a.LastUsedAt, a.LastUsedExact = &t, lu.Exact
			}
			data = append(data, a)
		}
		writeJSON(w, http.StatusOK, map[string]any{"month": month, "data": data})
	})
}

// lastUsedScan bounds how many of the newest usage records a key activity read goes through
// for exact times; keys not met among them show their last day.
const lastUsedScan = 200_000

// retentionDays is store.usage_retention_days of the running configuration.
func (s *api) retentionDays() int {
	if cfg := s.runtime.Config(); cfg != nil {
		return cfg.Store.UsageRetentionDays
	}
	return 0
}

// writeUsageCSV writes grouped usage as CSV, one row per group and a TOTAL row, for
// spreadsheets. Cells that a spreadsheet would take for a formula get a leading quote.
func writeUsageCSV(w http.ResponseWriter, u adminapi.GroupedUsage) {
	name := "tollway-usage"
	for _, p := range []string{u.Since, u.Until} {
		if p != "" {
			name += "-" + p
		}
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	cw := encsv.NewWriter(w)
	head := make([]string, 0, len(u.By)+9)
	for _, d := range u.By {
		if d == "key" {
			d = "key_id"
		}
		head = append(head, d)
	}
	head = append(head, "requests", "prompt_tokens", "completion_tokens", "cached_tokens", "estimated_requests", "cost", "paid", "pending", "unpaid")
	_ = cw.Write(head)
	orEmpty := func(d *decimal.Decimal) string {
		if d == nil {
			return ""
		}
		return d.String()
	}
	line := func(group []string, t store.UsageTotals) {
		rec := append(group, strconv.FormatInt(t.Requests, 10), strconv.FormatInt(t.PromptTokens, 10),
			strconv.FormatInt(t.CompletionTokens, 10), strconv.FormatInt(t.CachedTokens, 10),
			strconv.FormatInt(t.EstimatedRequests, 10), t.Cost.String(), orEmpty(t.Paid), orEmpty(t.Pending), orEmpty(t.Unpaid))
		_ = cw.Write(rec)
	}
	for _, r := range u.Rows {
		group := make([]string, len(u.By))
		for i, d := range u.By {
			group[i] = csvCell(r.Group[d])
		}
		line(group, r.UsageTotals)
	}
	total := make([]string, len(u.By))
	if len(total) > 0 {
		total[0] = "TOTAL"
	}
	line(total, u.Totals)
	cw.Flush()
}

func csvCell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}
