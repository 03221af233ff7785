package app

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
	// PAID is what x402 payments settled (those requests' COST was not taken from credits).
	fmt.Fprintln(tw, "DAY\tACCOUNT\tKEY\tMODEL\tREQUESTS\tPROMPT\tCOMPLETION\tESTIMATED\tCOST\tPAID")
	for _, r := range sum.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Day, r.Account, r.KeyID, r.Model, r.Requests, r.PromptTokens, r.CompletionTokens, r.EstimatedRequests, r.Cost.String(), paidCell(r.Paid))
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t\t%d\t%d\t%d\t%d\t%s\t%s\n", sum.Requests, sum.PromptTokens, sum.CompletionTokens, sum.EstimatedRequests, sum.Cost.String(), paidCell(sum.Paid))
	return tw.Flush()
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
