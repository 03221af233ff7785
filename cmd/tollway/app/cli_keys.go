package app

import (
	"context"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"
)

const keysHelp = `  tollway keys create --account A [--name N] [--monthly-limit 5] [--models m1,m2]
                                                      create an API key; prints it once
  tollway keys list                                   list keys (never their secrets)
  tollway keys revoke ID                              revoke a key
  tollway keys rotate ID                              replace a key's secret; prints the new one once
`

func cmdKeys(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("keys")
	account := fs.String("account", "", "account the key bills")
	name := fs.String("name", "", "a name for the key")
	limit := fs.String("monthly-limit", "", "the key's monthly spend limit in USD (calendar month, UTC)")
	models := fs.String("models", "", "comma-separated models or routes the key may use (default: all)")
	pos, err := c.parse(fs, args, map[string][]string{"create": {"account", "name", "monthly-limit", "models"}})
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 1 && pos[0] == "create":
		if *account == "" {
			return fmt.Errorf("%w: keys create needs --account A (create one with tollway accounts create A)", ErrUsage)
		}
		req := map[string]any{"account": *account, "name": *name}
		if *limit != "" {
			if err := amountFlag("--monthly-limit", *limit); err != nil {
				return err
			}
			req["monthly_limit"] = *limit
		}
		if *models != "" {
			req["models"] = csv(*models)
		}
		var k keyView
		if err := c.call(ctx, http.MethodPost, "/admin/v1/keys", req, &k); err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, k.Secret)
		fmt.Fprintf(c.stderr, "created key %s for account %s; store it now, it is not shown again\n", k.ID, k.Account)
		return nil
	case len(pos) == 1 && pos[0] == "list":
		var out struct{ Data []keyView }
		if err := c.call(ctx, http.MethodGet, "/admin/v1/keys", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tACCOUNT\tNAME\tCREATED\tSTATUS")
		for _, k := range out.Data {
			status := "active"
			if k.RevokedAt != nil {
				status = "revoked " + k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Account, k.Name, k.CreatedAt.Format(time.RFC3339), status)
		}
		return tw.Flush()
	case len(pos) == 2 && (pos[0] == "revoke" || pos[0] == "rotate"):
		var k keyView
		if err := c.call(ctx, http.MethodPost, "/admin/v1/keys/"+pathEscape(pos[1])+"/"+pos[0], nil, &k); err != nil {
			return err
		}
		if pos[0] == "rotate" {
			fmt.Fprintln(c.stdout, k.Secret)
			fmt.Fprintf(c.stderr, "rotated key %s; the old secret no longer works\n", k.ID)
		} else {
			fmt.Fprintf(c.stdout, "revoked key %s\n", k.ID)
		}
		return nil
	}
	return fmt.Errorf("%w: keys takes create, list, revoke ID or rotate ID:\n%s", ErrUsage, keysHelp)
}
