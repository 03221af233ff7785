package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

const usageHelp = `  tollway usage [--key ID] [--account A] [--model M] [--since 2026-11-01] [--until 2026-12-01]
                                                      usage and cost per day, key and model (UTC days)
`

func cmdUsage(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("usage")
	filters := map[string]*string{
		"key":     fs.String("key", "", "usage of one key (its id)"),
		"account": fs.String("account", "", "usage of one account"),
		"model":   fs.String("model", "", "usage of one model"),
		"since":   fs.String("since", "", "from this day on (YYYY-MM-DD, UTC)"),
		"until":   fs.String("until", "", "before this day (YYYY-MM-DD, UTC)"),
	}
	pos, err := c.parse(fs, args, map[string][]string{"": {"key", "account", "model", "since", "until"}})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: usage takes only flags:\n%s", ErrUsage, usageHelp)
	}
	q := url.Values{}
	for name, v := range filters {
		if *v == "" {
			continue
		}
		if (name == "since" || name == "until") && !isDate(*v) {
			return fmt.Errorf("%w: --%s %q is not a day; write it like 2026-11-01", ErrUsage, name, *v)
		}
		q.Set(name, *v)
	}
	var sum store.UsageSummary
	if err := c.call(ctx, http.MethodGet, "/admin/v1/usage?"+q.Encode(), nil, &sum); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	// PAID is what x402 payments settled (those requests' COST was not taken from credits),
	// PENDING what is still being settled, UNPAID what never settled (served unpaid).
	fmt.Fprintln(tw, "DAY\tACCOUNT\tKEY\tMODEL\tREQUESTS\tPROMPT\tCOMPLETION\tESTIMATED\tCOST\tPAID\tPENDING\tUNPAID")
	for _, r := range sum.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Day, r.Account, r.KeyID, r.Model, totalsCells(r.UsageTotals))
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t\t%s\n", totalsCells(sum.UsageTotals))
	return tw.Flush()
}

// totalsCells are the counters' columns of a usage row, tab-separated.
func totalsCells(t store.UsageTotals) string {
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s", t.Requests, t.PromptTokens, t.CompletionTokens, t.EstimatedRequests, t.Cost.String(),
		paidCell(t.Paid), paidCell(t.Pending), paidCell(t.Unpaid))
}

func paidCell(d *decimal.Decimal) string {
	if d == nil {
		return "-"
	}
	return d.String()
}

func isDate(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}
