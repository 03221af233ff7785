package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const routesHelp = `  tollway routes list                                 routes with rule, status, rates, health and usage
  tollway routes create NAME --rule priority_fallback --models m1,m2 [--rpm 600] [--tpm 1000000]
  tollway routes create NAME --rule mode_mapping --modes fast=m1,balanced=m2,deep=m3
                                                      create a route; its id is route:<NAME as a slug>;
                                                      --rpm/--tpm cap every request through it, all keys together
  tollway routes set-limit ID [--rpm N|none] [--tpm N|none]
                                                      change a route's rates (none: no limit); only those given change
  tollway routes pause ID | tollway routes resume ID  stop serving a route (409 route_paused) or serve it again
`

func cmdRoutes(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("routes")
	rule := fs.String("rule", "", "priority_fallback or mode_mapping")
	models := fs.String("models", "", "priority_fallback: models in order, comma-separated")
	modes := fs.String("modes", "", "mode_mapping: fast=m1,balanced=m2,deep=m3")
	rpm := fs.String("rpm", "", "requests per minute through the route, all keys together (none: no limit)")
	tpm := fs.String("tpm", "", "tokens per minute through the route, all keys together (none: no limit)")
	pos, err := c.parse(fs, args, map[string][]string{"create": {"rule", "models", "modes", "rpm", "tpm"}, "set-limit": {"rpm", "tpm"}})
	if err != nil {
		return err
	}
	rates, err := rateFlags{*rpm, *tpm}.body()
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 1 && pos[0] == "list":
		return routesList(ctx, c)
	case len(pos) == 2 && pos[0] == "set-limit":
		return routesSetLimit(ctx, c, pos[1], rates)
	case len(pos) == 2 && pos[0] == "create":
		req := map[string]any{"name": pos[1], "rule": *rule}
		if rates != nil {
			req["rate_limits"] = rates
		}
		if *models != "" {
			req["models"] = csv(*models)
		}
		if *modes != "" {
			mm := map[string]string{}
			for _, kv := range csv(*modes) {
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
		fmt.Fprintf(c.stdout, "route %s%s created\n", ir.RoutePrefix, ir.Slug(pos[1]))
		return nil
	case len(pos) == 2 && (pos[0] == "pause" || pos[0] == "resume"):
		var out json.RawMessage
		if err := c.call(ctx, http.MethodPost, "/admin/v1/routes/"+pathEscape(pos[1])+"/"+pos[0], nil, &out); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "route %s %sd\n", pos[1], pos[0])
		return nil
	}
	return fmt.Errorf("%w: routes takes list, create NAME, set-limit ID, pause ID or resume ID:\n%s", ErrUsage, routesHelp)
}

// routesSetLimit is `routes set-limit ID [--rpm N|none] [--tpm N|none]` (PATCH
// /admin/v1/routes/{id}): only the rates given change.
func routesSetLimit(ctx context.Context, c *cli, id string, rates map[string]any) error {
	if rates == nil {
		return fmt.Errorf("%w: write routes set-limit ID --rpm N|none and/or --tpm N|none, e.g. routes set-limit route:support-bot --rpm 600", ErrUsage)
	}
	var r adminapi.RouteView
	if err := c.call(ctx, http.MethodPatch, "/admin/v1/routes/"+pathEscape(id), map[string]any{"rate_limits": rates}, &r); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "route %s: rates %s per minute (requests/tokens), all keys together\n", r.ID, routeRatesText(r.RateLimits))
	return err
}

// routeRatesText is a route's rates as rpm/tpm, "none" for one it does not limit.
func routeRatesText(r *store.RateLimits) string {
	return strings.ReplaceAll(ratesText(r), "default", "none")
}

func routesList(ctx context.Context, c *cli) error {
	var out adminapi.List[adminapi.RouteView]
	if err := c.call(ctx, http.MethodGet, "/admin/v1/routes", nil, &out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tRULE\tMODELS\tSTATUS\tRPM/TPM\tHEALTH\tREQUESTS\tCOST")
	for _, r := range out.Data {
		models := strings.Join(r.Models, ",")
		if r.Rule == ir.RuleModeMapping {
			var parts []string
			for _, m := range ir.Modes {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Name, r.Rule, models, r.Status, routeRatesText(r.RateLimits), r.Health, reqs, cost.String())
	}
	return tw.Flush()
}
