// Package app is the tollway command: the `run` gateway process and the CLI subcommands that
// talk to a running gateway's admin API. Viper is used only here.
package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const usage = `tollway: an Envoy-native model gateway

usage:
  tollway run [--config FILE]                         run the gateway (embedded default config without --config)
  tollway accounts create A [--credits 25]            create an account with prepaid credits (USD)
  tollway accounts credit A 10                        add credits
  tollway accounts list                               balances and what is available now
  tollway keys create --account A [--name N] [--monthly-limit 5] [--models m1,m2]
                                                      create an API key; prints it once
  tollway keys list                                   list keys (never their secrets)
  tollway keys revoke ID                              revoke a key
  tollway keys rotate ID                              replace a key's secret; prints the new one once
  tollway usage [--key ID] [--account A] [--model M] [--since 2026-11-01]
                                                      usage and cost per day, key and model
  tollway routes list                                 routes with rule, status, health and usage
  tollway routes create NAME --rule priority_fallback --models m1,m2
  tollway routes create NAME --rule mode_mapping --modes fast=m1,balanced=m2,deep=m3
  tollway routes pause ID | tollway routes resume ID
  tollway reload                                      re-read the config file of the running gateway
  tollway status                                      configuration delivery status
  tollway store compact [--config FILE]               shrink the store file (the gateway must be stopped)

Commands other than run talk to the running gateway's admin API, found through --config FILE
(listen.admin) or given as --admin http://127.0.0.1:9090.
`

// ErrUsage marks a command line that cannot be run.
var ErrUsage = errors.New("usage")

// Run executes the command line args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if args[0] == "store" {
		return runStore(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("tollway "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (YAML)")
	adminURL := fs.String("admin", "", "admin API base URL, e.g. http://127.0.0.1:9090")
	account := fs.String("account", "", "account the key belongs to")
	name := fs.String("name", "", "a name for the key")
	credits := fs.String("credits", "0", "initial credits in USD (accounts create)")
	limit := fs.String("monthly-limit", "", "the key's monthly spend limit in USD (calendar month, UTC)")
	models := fs.String("models", "", "comma-separated models the key may use (default: all)")
	keyID := fs.String("key", "", "usage of one key")
	model := fs.String("model", "", "usage of one model")
	since := fs.String("since", "", "usage from this date (YYYY-MM-DD, UTC)")
	rule := fs.String("rule", "", "route rule: priority_fallback or mode_mapping")
	modes := fs.String("modes", "", "route modes: fast=m1,balanced=m2,deep=m3")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if args[0] == "run" {
		cfg, err := LoadConfig(*configPath)
		if err != nil {
			return err
		}
		return runGateway(ctx, cfg, stdout, stderr)
	}
	c, err := newAdminClient(*adminURL, *configPath)
	if err != nil {
		return err
	}
	switch strings.Join(append([]string{args[0]}, first(pos)...), " ") {
	case "keys create":
		if *account == "" {
			return fmt.Errorf("%w: keys create needs --account", ErrUsage)
		}
		req := map[string]any{"account": *account, "name": *name}
		if *limit != "" {
			req["monthly_limit"] = *limit
		}
		if *models != "" {
			req["models"] = strings.Split(*models, ",")
		}
		var k keyView
		if err := c.call(ctx, http.MethodPost, "/admin/v1/keys", req, &k); err != nil {
			return err
		}
		fmt.Fprintln(stdout, k.Secret)
		fmt.Fprintf(stderr, "created key %s for account %s; store it now, it is not shown again\n", k.ID, k.Account)
		return nil
	case "keys list":
		var out struct{ Data []keyView }
		if err := c.call(ctx, http.MethodGet, "/admin/v1/keys", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tACCOUNT\tNAME\tCREATED\tSTATUS")
		for _, k := range out.Data {
			status := "active"
			if k.RevokedAt != nil {
				status = "revoked " + k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Account, k.Name, k.CreatedAt.Format(time.RFC3339), status)
		}
		return tw.Flush()
	case "keys revoke", "keys rotate":
		if len(pos) != 2 {
			return fmt.Errorf("%w: keys %s ID", ErrUsage, pos[0])
		}
		var k keyView
		if err := c.call(ctx, http.MethodPost, "/admin/v1/keys/"+pos[1]+"/"+pos[0], nil, &k); err != nil {
			return err
		}
		if pos[0] == "rotate" {
			fmt.Fprintln(stdout, k.Secret)
			fmt.Fprintf(stderr, "rotated key %s; the old secret no longer works\n", k.ID)
		} else {
			fmt.Fprintf(stdout, "revoked key %s\n", k.ID)
		}
		return nil
	case "accounts create":
		if len(pos) != 2 {
			return fmt.Errorf("%w: accounts create ACCOUNT [--credits 25]", ErrUsage)
		}
		var a accountView
		if err := c.call(ctx, http.MethodPost, "/admin/v1/accounts", map[string]string{"id": pos[1], "credits": *credits}, &a); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "account %s created with %s credits\n", a.ID, a.Balance.String())
		return nil
	case "accounts credit":
		if len(pos) != 3 {
			return fmt.Errorf("%w: accounts credit ACCOUNT AMOUNT", ErrUsage)
		}
		var a accountView
		if err := c.call(ctx, http.MethodPost, "/admin/v1/accounts/"+pos[1]+"/credit", map[string]string{"amount": pos[2]}, &a); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "account %s balance %s\n", a.ID, a.Balance.String())
		return nil
	case "accounts list":
		var out struct{ Data []accountView }
		if err := c.call(ctx, http.MethodGet, "/admin/v1/accounts", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ACCOUNT\tBALANCE\tAVAILABLE\tCREATED")
		for _, a := range out.Data {
			avail := "-"
			if a.Available != nil {
				avail = a.Available.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.ID, a.Balance.String(), avail, a.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	case "usage":
		q := url.Values{}
		for k, v := range map[string]string{"key": *keyID, "account": *account, "model": *model, "since": *since} {
			if v != "" {
				q.Set(k, v)
			}
		}
		var sum store.UsageSummary
		if err := c.call(ctx, http.MethodGet, "/admin/v1/usage?"+q.Encode(), nil, &sum); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DAY\tACCOUNT\tKEY\tMODEL\tREQUESTS\tPROMPT\tCOMPLETION\tESTIMATED\tCOST")
		for _, r := range sum.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.Day, r.Account, r.KeyID, r.Model, r.Requests, r.PromptTokens, r.CompletionTokens, r.EstimatedRequests, r.Cost.String())
		}
		fmt.Fprintf(tw, "TOTAL\t\t\t\t%d\t%d\t%d\t%d\t%s\n", sum.Requests, sum.PromptTokens, sum.CompletionTokens, sum.EstimatedRequests, sum.Cost.String())
		return tw.Flush()
	case "routes list":
		var out struct{ Data []routeView }
		if err := c.call(ctx, http.MethodGet, "/admin/v1/routes", nil, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tRULE\tMODELS\tSTATUS\tHEALTH\tREQUESTS\tCOST")
		for _, r := range out.Data {
			models := strings.Join(r.Models, ",")
			if r.Rule == "mode_mapping" {
				var parts []string
				for _, m := range []string{"fast", "balanced", "deep"} {
					if v, ok := r.Modes[m]; ok {
						parts = append(parts, m+"="+v)
					}
				}
				models = strings.Join(parts, ",")
			}
			var reqs int64
			cost := decimal.Zero
			for _, u := range r.Usage {
				reqs += u.Requests
				cost = cost.Add(u.Cost)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Name, r.Rule, models, r.Status, r.Health, reqs, cost.String())
		}
		return tw.Flush()
	case "routes create":
		if len(pos) != 2 {
			return fmt.Errorf("%w: routes create NAME --rule ... (--models m1,m2 | --modes fast=m1,...)", ErrUsage)
		}
		req := map[string]any{"name": pos[1], "rule": *rule}
		if *models != "" {
			req["models"] = strings.Split(*models, ",")
		}
		if *modes != "" {
			mm := map[string]string{}
			for _, kv := range strings.Split(*modes, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("%w: --modes takes fast=model,balanced=model,deep=model", ErrUsage)
				}
				mm[k] = v
			}
			req["modes"] = mm
		}
		var out json.RawMessage
		if err := c.call(ctx, http.MethodPost, "/admin/v1/routes", req, &out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "route route:%s created\n", slug(pos[1]))
		return nil
	case "routes pause", "routes resume":
		if len(pos) != 2 {
			return fmt.Errorf("%w: routes %s ROUTE_ID", ErrUsage, pos[0])
		}
		var out json.RawMessage
		if err := c.call(ctx, http.MethodPost, "/admin/v1/routes/"+pos[1]+"/"+pos[0], nil, &out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "route %s %sd\n", pos[1], pos[0])
		return nil
	case "reload", "status":
		method, path := http.MethodGet, "/admin/v1/status"
		if args[0] == "reload" {
			method, path = http.MethodPost, "/admin/v1/reload"
		}
		var out json.RawMessage
		if err := c.call(ctx, method, path, nil, &out); err != nil {
			return err
		}
		_, err := fmt.Fprintln(stdout, string(out))
		return err
	}
	return fmt.Errorf("%w: unknown command %q; run tollway help", ErrUsage, strings.Join(append([]string{args[0]}, first(pos)...), " "))
}

func first(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s[:1]
}

// parseInterspersed lets flags come after positional arguments (tollway keys revoke ID --config f).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

type adminClient struct {
	base string
	http *http.Client
}

func newAdminClient(adminURL, configPath string) (*adminClient, error) {
	if adminURL == "" {
		cfg, err := LoadConfig(configPath)
		if err != nil {
			return nil, err
		}
		adminURL = "http://" + cfg.Listen.Admin
	}
	return &adminClient{base: strings.TrimRight(adminURL, "/"), http: &http.Client{Timeout: 30 * time.Second}}, nil
}

func (c *adminClient) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API %s: %w (is the gateway running? start it with `tollway run`)", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Message, Code string }
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s (%s)", e.Error.Message, e.Error.Code)
		}
		return fmt.Errorf("admin API answered %d: %s", resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

func slug(name string) string { return ir.Slug(name) }
