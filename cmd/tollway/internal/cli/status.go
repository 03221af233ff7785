package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
)

const (
	reloadHelp = `  tollway reload                                      re-read the config file of the running gateway
`
	statusHelp = `  tollway status [--json]                             one screen: listeners, Envoy, configuration delivery, providers, models, replicas, today's usage
`
)

func cmdReload(ctx context.Context, c *cli, args []string) error {
	return statusCall(ctx, c, "reload", http.MethodPost, "/admin/v1/reload", args)
}

func cmdStatus(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("status")
	asJSON := fs.Bool("json", false, "print the admin API's answer as it is")
	pos, err := c.parse(fs, args, map[string][]string{"": {"json"}})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: status takes no arguments", ErrUsage)
	}
	var raw json.RawMessage
	if err := c.call(ctx, http.MethodGet, "/admin/v1/status", nil, &raw); err != nil {
		return err
	}
	if *asJSON {
		_, err = fmt.Fprintln(c.stdout, string(raw))
		return err
	}
	var st adminapi.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("the admin API's status is not what this CLI reads (%v); try --json", err)
	}
	return printStatus(c.stdout, st)
}

// printStatus writes the one-screen summary of `tollway status`.
func printStatus(w io.Writer, st adminapi.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(label, format string, a ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{label}, a...)...)
	}
	e := st.Envoy
	if e.State == "external" {
		line("gateway", "external Envoys: xds %s, ext_proc %s   admin http://%s", st.Listeners.XDS, st.Listeners.ExtProc, st.Listeners.Admin)
	} else {
		line("gateway", "http://%s/v1   admin http://%s", st.Listeners.Public, st.Listeners.Admin)
	}
	switch {
	case e.State == "external":
		line("envoy", "started elsewhere (tollway bootstrap); %d nodes", len(st.Nodes))
	case e.State == "unknown":
		line("envoy", "pid %d, not answering its admin endpoint: %s", e.PID, e.Error)
	case e.Version != "":
		line("envoy", "%s pid %d %s, up %s", e.Version, e.PID, e.State, (time.Duration(e.Uptime) * time.Second).String())
	default:
		line("envoy", "pid %d %s", e.PID, e.State)
	}
	if e.Restarts > 0 {
		line("", "restarted %d times; last exit: %s", e.Restarts, e.LastExit)
	}
	delivery := fmt.Sprintf("version %d accepted (ACK)", st.AcceptedVersion)
	if st.Version != st.AcceptedVersion {
		delivery = fmt.Sprintf("version %d pushed, %d accepted", st.Version, st.AcceptedVersion)
	}
	if !st.Connected {
		delivery += ", Envoy not connected"
	}
	line("config", "%s", delivery)
	if e.State == "external" || len(st.Nodes) > 1 {
		for _, n := range st.Nodes {
			state := "connected"
			if !n.Connected {
				state = "disconnected"
			}
			ack := fmt.Sprintf("version %d accepted", n.AcceptedVersion)
			if n.AcceptedVersion != n.Version {
				ack = fmt.Sprintf("version %d pushed, %d accepted", n.Version, n.AcceptedVersion)
			}
			if n.LastRejection != "" {
				ack += ", last NACK: " + n.LastRejection
			}
			line("node", "%s %s (%s) %s", n.ID, state, cmp.Or(n.Listen, "listen.public"), ack)
		}
	}
	if st.LastRejection != "" {
		line("", "last NACK %s: %s", st.RejectedAt.UTC().Format(time.RFC3339), st.LastRejection)
	}
	var ps []string
	for _, p := range st.Providers {
		h := p.Health
		switch {
		case !p.Credential:
			h = "no credential"
		case p.Refused != nil:
			h = fmt.Sprintf("refused its credential %d times since %s (retried from %s)", p.Refused.Count, p.Refused.Since.Format(time.RFC3339), p.Refused.NextRetry.Format(time.RFC3339))
		}
		ps = append(ps, p.Name+" "+h)
	}
	line("providers", "%d: %s", len(st.Providers), strings.Join(ps, ", "))
	line("models", "%d of %d ready", st.Models.Ready, st.Models.Total)
	if s := st.Store; s.State == "unavailable" {
		line("store", "UNAVAILABLE (%s) since %s: billable requests, task creates and paid requests are refused with 503 store_unavailable; %d records queued; %s",
			s.Cause, s.Since.Format(time.RFC3339), s.Queued, s.Error)
	} else if s.State != "" && s.Database == nil {
		line("store", "%s ok, %d records queued, reserve %s", cmp.Or(s.Driver, "bbolt"), s.Queued, s.Reserve)
	}
	printShared(line, st.Store)
	printReplicas(line, st.Replicas)
	t := st.Today
	line("today", "%d requests, %d tokens in, %d out, cost %s USD (%s UTC)", t.Requests, t.PromptTokens, t.CompletionTokens, t.Cost.String(), t.Day)
	return tw.Flush()
}

// printShared shows the shared database's state and the spool's lag (driver postgres).
func printShared(line func(label, format string, a ...any), s adminapi.StoreStatus) {
	if db := s.Database; db != nil {
		if db.State == "reachable" {
			line("store", "postgres at %s reachable", db.At)
		} else {
			line("store", "postgres at %s UNREACHABLE since %s: usage records are spooled and shipped when it is back; admin writes fail; %s",
				db.At, db.Since.Format(time.RFC3339), db.Error)
		}
	}
	if sp := s.Spool; sp != nil {
		lag := "none waiting"
		if sp.Oldest != nil {
			lag = fmt.Sprintf("oldest %s (%.1f s)", sp.Oldest.Format(time.RFC3339), sp.LagSeconds)
		}
		line("spool", "%s: %d records not shipped, %s; %d holds, %d shipped, %d refused by the database", sp.Path, sp.Records, lag, sp.Holds, sp.Shipped, sp.Rejected)
	}
}

// printReplicas lists the gateways sharing the store, one line each after a count.
func printReplicas(line func(label, format string, a ...any), rs []adminapi.ReplicaStatus) {
	live := 0
	for _, r := range rs {
		if !r.Gone {
			live++
		}
	}
	line("replicas", "%d live of %d sharing the store", live, len(rs))
	for _, r := range rs {
		state, self := "live", ""
		if r.Gone {
			state = "GONE (silent past its lease)"
		}
		if r.Self {
			self = " (this one)"
		}
		line("", "%s%s %s, version %s, started %s, last seen %s", r.Name, self, state, r.Version,
			r.StartedAt.Format(time.RFC3339), r.LastSeen.Format(time.RFC3339))
	}
}

// statusCall calls an endpoint that answers with the delivery status and prints it.
func statusCall(ctx context.Context, c *cli, name, method, path string, args []string) error {
	pos, err := c.parse(c.flags(name), args, nil)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: %s takes no arguments", ErrUsage, name)
	}
	var out json.RawMessage
	if err := c.call(ctx, method, path, nil, &out); err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, string(out))
	return err
}
