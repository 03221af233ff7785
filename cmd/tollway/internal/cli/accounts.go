package cli

import (
	"context"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
)

const accountsHelp = `  tollway accounts create A [--credits 25]            create an account with prepaid credits (USD)
  tollway accounts credit A 10                        add credits (USD)
  tollway accounts list                               balances and what is available now
`

func cmdAccounts(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("accounts")
	credits := fs.String("credits", "0", "initial credits in USD")
	pos, err := c.parse(fs, args, map[string][]string{"create": {"credits"}})
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 2 && pos[0] == "create":
		if err := amountFlag("--credits", *credits); err != nil {
			return err
		}
		var a adminapi.Account
		if err := c.call(ctx, http.MethodPost, "/admin/v1/accounts", map[string]string{"id": pos[1], "credits": *credits}, &a); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "account %s created with %s credits\n", a.ID, a.Balance.String())
		return nil
	case len(pos) == 3 && pos[0] == "credit":
		if _, err := adminapi.ParseAmount(pos[2]); err != nil {
			return fmt.Errorf("%w: accounts credit %s AMOUNT: %v", ErrUsage, pos[1], err)
		}
		var a adminapi.Account
		if err := c.call(ctx, http.MethodPost, "/admin/v1/accounts/"+pathEscape(pos[1])+"/credit", map[string]string{"amount": pos[2]}, &a); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "account %s balance %s\n", a.ID, a.Balance.String())
		return nil
	case len(pos) == 1 && pos[0] == "list":
		var out adminapi.List[adminapi.Account]
		if err := c.call(ctx, http.MethodGet, "/admin/v1/accounts", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ACCOUNT\tBALANCE\tAVAILABLE\tCREATED\tCALLBACK SECRET")
		for _, a := range out.Data {
			avail := "-"
			if a.Available != nil {
				avail = a.Available.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.ID, a.Balance.String(), avail, a.CreatedAt.Format(time.RFC3339), a.CallbackSecret)
		}
		return tw.Flush()
	}
	return fmt.Errorf("%w: accounts takes create A [--credits 25], credit A AMOUNT or list:\n%s", ErrUsage, accountsHelp)
}
