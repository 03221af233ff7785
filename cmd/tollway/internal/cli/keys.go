package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const keysHelp = `  tollway keys create --account A [--name N] [--monthly-limit 5] [--models m1,m2] [--rpm 60] [--tpm 100000]
                                                      create an API key; prints it once
  tollway keys list [--json]                          list keys (never their secrets): monthly limit,
                                                      spent this month (UTC), allowed models, rates
  tollway keys set-limit KEY_ID [AMOUNT|none] [--rpm N|none] [--tpm N|none]
                                                      set a key's monthly limit in USD and its requests
                                                      and tokens per minute (none: no limit of the
                                                      key's own); what is not given is kept
  tollway keys set-models KEY_ID MODEL...|all         set the models and route:<id>s a key may use
                                                      (all: every one)
  tollway keys revoke ID                              revoke a key
  tollway keys rotate ID                              replace a key's secret; prints the new one once
`

// keysUsage is the usage error for a keys command line that cannot be run.
var keysUsage = fmt.Errorf("%w: keys takes create, list, set-limit KEY_ID [AMOUNT|none] [--rpm N|none] [--tpm N|none], set-models KEY_ID MODEL...|all, revoke ID or rotate ID:\n%s", ErrUsage, keysHelp)

func cmdKeys(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("keys")
	account := fs.String("account", "", "account the key bills")
	name := fs.String("name", "", "a name for the key")
	limit := fs.String("monthly-limit", "", "the key's monthly spend limit in USD (calendar month, UTC)")
	models := fs.String("models", "", "comma-separated models or routes the key may use (default: all)")
	asJSON := fs.Bool("json", false, "print the admin API's answer as it is")
	rpm := fs.String("rpm", "", "the key's requests per minute (none: no limit of its own)")
	tpm := fs.String("tpm", "", "the key's tokens per minute, prompt and completion (none: no limit of its own)")
	pos, err := c.parse(fs, args, map[string][]string{"create": {"account", "name", "monthly-limit", "models", "rpm", "tpm"},
		"list": {"json"}, "set-limit": {"rpm", "tpm"}})
	if err != nil {
		return err
	}
	verb := ""
	if len(pos) > 0 {
		verb = pos[0]
	}
	switch {
	case verb == "create" && len(pos) == 1:
		return keysCreate(ctx, c, *account, *name, *limit, *models, rateFlags{*rpm, *tpm})
	case verb == "list" && len(pos) == 1:
		return keysList(ctx, c, *asJSON)
	case verb == "set-limit":
		return keysSetLimit(ctx, c, pos[1:], rateFlags{*rpm, *tpm})
	case verb == "set-models":
		return keysSetModels(ctx, c, pos[1:])
	case (verb == "revoke" || verb == "rotate") && len(pos) == 2:
		return keysRevokeOrRotate(ctx, c, verb, pos[1])
	}
	return keysUsage
}

// rateFlags are --rpm and --tpm as given ("": not given, "none": no limit).
type rateFlags struct{ rpm, tpm string }

// body is the rate_limits member the flags set (nil: neither given), checked before anything
// is sent: a number is a whole number from 1, none is null.
func (r rateFlags) body() (map[string]any, error) {
	out := map[string]any{}
	for _, f := range []struct{ flag, field, v string }{{"--rpm", "requests_per_minute", r.rpm}, {"--tpm", "tokens_per_minute", r.tpm}} {
		switch f.v {
		case "":
			continue
		case "none":
			out[f.field] = nil
			continue
		}
		n, err := strconv.ParseInt(f.v, 10, 64)
		if err != nil || n < 1 || n > store.MaxRate {
			return nil, fmt.Errorf("%w: %s %s: write a whole number from 1 to %d (per minute), or none for no limit", ErrUsage, f.flag, ir.QuoteShort(f.v), store.MaxRate)
		}
		out[f.field] = n
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func keysCreate(ctx context.Context, c *cli, account, name, limit, models string, rates rateFlags) error {
	if account == "" {
		return fmt.Errorf("%w: keys create needs --account A (create one with tollway accounts create A)", ErrUsage)
	}
	req := map[string]any{"account": account, "name": name}
	if limit != "" {
		if err := amountFlag("--monthly-limit", limit); err != nil {
			return err
		}
		req["monthly_limit"] = limit
	}
	if models != "" {
		req["models"] = csv(models)
	}
	rl, err := rates.body()
	if err != nil {
		return err
	}
	if rl != nil {
		req["rate_limits"] = rl
	}
	var k adminapi.Key
	if err := c.call(ctx, http.MethodPost, "/admin/v1/keys", req, &k); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, k.Secret)
	fmt.Fprintf(c.stderr, "created key %s for account %s; store it now, it is not shown again\n", k.ID, k.Account)
	return nil
}

// keysList prints every key with its limit, its spend this month and its allowed models.
func keysList(ctx context.Context, c *cli, asJSON bool) error {
	var raw json.RawMessage
	if err := c.call(ctx, http.MethodGet, "/admin/v1/keys", nil, &raw); err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintln(c.stdout, string(raw))
		return err
	}
	var out adminapi.KeyList
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("the admin API's key list is not what this CLI reads (%v); try --json", err)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPREFIX\tACCOUNT\tNAME\tLIMIT\tSPENT\tMODELS\tRPM/TPM\tCREATED\tSTATUS")
	for _, k := range out.Data {
		status := "active"
		if k.RevokedAt != nil {
			status = "revoked " + k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Account, k.Name, limitText(k),
			orText(k.SpentThisMonth.String(), k.SpentThisMonth != nil, "?"), orText(strings.Join(k.Models, ","), len(k.Models) > 0, "all"),
			ratesText(k.RateLimits), k.CreatedAt.Format(time.RFC3339), status)
	}
	return tw.Flush()
}

// limitText is a key's monthly limit in USD, or "none".
func limitText(k adminapi.Key) string {
	if k.MonthlyLimit == nil {
		return "none"
	}
	return k.MonthlyLimit.String()
}

// ratesText is a key's own rates as rpm/tpm, "default" for one it leaves to the configuration.
func ratesText(r *store.RateLimits) string {
	one := func(p *int64) string {
		if p == nil {
			return "default"
		}
		return strconv.FormatInt(*p, 10)
	}
	if r == nil {
		r = &store.RateLimits{}
	}
	return one(r.RequestsPerMinute) + "/" + one(r.TokensPerMinute)
}

// orText is s when ok, otherwise instead.
func orText(s string, ok bool, instead string) string {
	if ok {
		return s
	}
	return instead
}

// keysSetLimit is `keys set-limit KEY_ID [AMOUNT|none] [--rpm N|none] [--tpm N|none]`: only
// what is given changes.
func keysSetLimit(ctx context.Context, c *cli, args []string, rates rateFlags) error {
	rl, err := rates.body()
	if err != nil {
		return err
	}
	if len(args) != 2 && !(len(args) == 1 && rl != nil) {
		return fmt.Errorf("%w: write keys set-limit KEY_ID AMOUNT|none [--rpm N|none] [--tpm N|none], e.g. keys set-limit key_0123456789abcdef 5, or keys set-limit key_0123456789abcdef --rpm 60", ErrUsage)
	}
	change := map[string]any{}
	if rl != nil {
		change["rate_limits"] = rl
	}
	if len(args) == 2 {
		if change["monthly_limit"], err = limitArg(args[1]); err != nil {
			return err
		}
	}
	k, err := patchKeyLimits(ctx, c, args[0], change)
	if err != nil {
		return err
	}
	spent := orText(k.SpentThisMonth.String(), k.SpentThisMonth != nil, "?")
	rateNote := ""
	if rl != nil {
		rateNote = ", rates " + ratesText(k.RateLimits) + " per minute (requests/tokens)"
	}
	if k.MonthlyLimit == nil {
		_, err = fmt.Fprintf(c.stdout, "key %s: no monthly limit, spent %s this month%s\n", k.ID, spent, rateNote)
	} else {
		_, err = fmt.Fprintf(c.stdout, "key %s: monthly limit %s USD, spent %s this month%s\n", k.ID, k.MonthlyLimit, spent, rateNote)
	}
	return err
}

// limitArg is set-limit's AMOUNT as the monthly_limit member: an amount, or nil (none).
func limitArg(arg string) (any, error) {
	var limit any // JSON null: no limit
	if arg != "none" {
		amount, err := adminapi.ParseAmount(arg)
		if err == nil && amount.IsNegative() {
			err = fmt.Errorf("%s is negative", ir.QuoteShort(arg))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: keys set-limit: %v; write it like 5 or 12.50, or none for no limit", ErrUsage, err)
		}
		limit = arg
	}
	return limit, nil
}

// keysSetModels is `keys set-models KEY_ID MODEL...|all`: only the allow-list changes. Models
// may also be given comma-separated, as keys create --models takes them.
func keysSetModels(ctx context.Context, c *cli, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("%w: write keys set-models KEY_ID MODEL...|all, e.g. keys set-models key_0123456789abcdef gpt-4o-mini route:support-bot", ErrUsage)
	}
	models := []string{}
	for _, a := range args[1:] {
		models = append(models, csv(a)...)
	}
	if len(models) == 1 && models[0] == "all" {
		models = []string{}
	}
	for _, m := range models {
		switch err := ir.CheckModelRef(m); {
		case m == "all":
			return fmt.Errorf("%w: keys set-models: write all alone (every model), or the models and routes the key may use", ErrUsage)
		case m == "":
			return fmt.Errorf("%w: keys set-models: an empty model in the list; separate models with spaces or commas", ErrUsage)
		case err != nil:
			return fmt.Errorf("%w: keys set-models: %s: %v", ErrUsage, ir.QuoteShort(m), err)
		}
	}
	k, err := patchKeyLimits(ctx, c, args[0], map[string]any{"models": models})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "key %s: models %s\n", k.ID, orText(strings.Join(k.Models, ", "), len(k.Models) > 0, "all"))
	return err
}

// patchKeyLimits changes the key's settings in change, leaving the others as they are.
func patchKeyLimits(ctx context.Context, c *cli, id string, change map[string]any) (adminapi.Key, error) {
	var k adminapi.Key
	err := c.call(ctx, http.MethodPatch, "/admin/v1/keys/"+pathEscape(id)+"/limits", change, &k)
	return k, err
}

func keysRevokeOrRotate(ctx context.Context, c *cli, verb, id string) error {
	var k adminapi.Key
	if err := c.call(ctx, http.MethodPost, "/admin/v1/keys/"+pathEscape(id)+"/"+verb, nil, &k); err != nil {
		return err
	}
	if verb == "rotate" {
		fmt.Fprintln(c.stdout, k.Secret)
		fmt.Fprintf(c.stderr, "rotated key %s; the old secret no longer works\n", k.ID)
	} else {
		fmt.Fprintf(c.stdout, "revoked key %s\n", k.ID)
	}
	return nil
}
