// Package cli is the tollway command line: the dispatch table, the global flags, `tollway help`
// and the commands, each group in a file of its own with its lines of help. `run` starts the
// gateway (package server); the other commands talk to a running gateway's admin API, reading
// its answers as the adminapi types the handlers write.
package cli

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
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/xds/ir"
)

// This file owns the command line: the dispatch table, the global flags and the admin API
// client. Each command group lives in <group>.go with its lines of `tollway help`.

// command is one command group: its first word, its handler (given the words after that
// word) and its lines of `tollway help`.
type command struct {
	name string
	run  func(ctx context.Context, c *cli, args []string) error
	help string
}

// commands is the one dispatch table, in the order `tollway help` lists the groups.
var commands = []command{
	{"run", cmdRun, runHelp},
	{"accounts", cmdAccounts, accountsHelp},
	{"keys", cmdKeys, keysHelp},
	{"usage", cmdUsage, usageHelp},
	{"routes", cmdRoutes, routesHelp},
	{"store", cmdStore, storeHelp},
	{"reload", cmdReload, reloadHelp},
	{"status", cmdStatus, statusHelp},
	{"bootstrap", cmdBootstrap, bootstrapHelp},
}

const (
	helpHeader = `tollway: an Envoy-native model gateway

usage: tollway [global flags] COMMAND [flags]

`
	helpFooter = `  tollway help [COMMAND]                              this text, or one command's

Global flags, before or after the command:
  --config FILE        the config file: run serves it; the other commands find the admin API
                       (listen.admin) and its token (admin.token) in it
  --admin URL          the admin API, e.g. http://127.0.0.1:9090 (instead of --config's)
  --admin-token TOKEN  the gateway's admin token (default: $TOLLWAY_ADMIN_TOKEN, then the
                       config's admin.token)

Commands other than run talk to the running gateway's admin API; without --config or --admin
they use the embedded default config's listen.admin (127.0.0.1:9090).
`
)

// ErrUsage marks a command line that cannot be run.
var ErrUsage = errors.New("usage")

// Run executes the command line args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := &cli{stdout: stdout, stderr: stderr}
	fs := c.flags("tollway")
	err := fs.Parse(args)
	rest := fs.Args()
	if errors.Is(err, flag.ErrHelp) || (err == nil && len(rest) == 0) {
		fmt.Fprint(stdout, helpText(""))
		return nil
	}
	if err != nil {
		return c.flagErr(fs, err)
	}
	name := rest[0]
	if name == "help" && len(rest) > 1 {
		name = rest[1]
	}
	i := slices.IndexFunc(commands, func(cmd command) bool { return cmd.name == name })
	switch {
	case rest[0] == "help" && (i >= 0 || len(rest) == 1):
		fmt.Fprint(stdout, helpText(name))
		return nil
	case i < 0:
		return fmt.Errorf("%w: unknown command %s; run tollway help", ErrUsage, ir.QuoteShort(name))
	}
	if err := commands[i].run(ctx, c, rest[1:]); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	fmt.Fprint(stdout, helpText(name))
	return nil
}

// helpText is the whole help, or one command group's.
func helpText(group string) string {
	var b strings.Builder
	b.WriteString(helpHeader)
	for _, cmd := range commands {
		if group == "" || group == "help" || group == cmd.name {
			b.WriteString(cmd.help)
		}
	}
	b.WriteString(helpFooter)
	return b.String()
}

// cli is one command line being run: the global flags and the output streams.
type cli struct {
	stdout, stderr            io.Writer
	config, admin, adminToken string
}

// flags is a flag set for one command, holding the global flags too so they may come anywhere.
func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, help printed by flagErr
	fs.Usage = func() {}
	fs.StringVar(&c.config, "config", c.config, "config file (YAML)")
	fs.StringVar(&c.admin, "admin", c.admin, "admin API base URL, e.g. http://127.0.0.1:9090")
	fs.StringVar(&c.adminToken, "admin-token", c.adminToken, "the gateway's admin token")
	return fs
}

// flagErr turns flag errors into usage errors; -h and --help stay flag.ErrHelp, which Run
// answers with the command's help.
func (c *cli) flagErr(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if fs.Name() == "tollway" {
		return fmt.Errorf("%w: %v; run tollway help", ErrUsage, err)
	}
	return fmt.Errorf("%w: %v; run tollway help %s", ErrUsage, err, fs.Name())
}

// parse lets flags come before, between and after positional words (tollway keys revoke ID
// --config f) and refuses flags the verb (the first word) does not take; global flags are
// taken by every command.
func (c *cli) parse(fs *flag.FlagSet, args []string, takes map[string][]string) ([]string, error) {
	var pos []string
	for {
		if len(args) > 0 && negativeNumber.MatchString(args[0]) { // an amount, not a flag: its command says why it is refused
			pos, args = append(pos, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			return nil, c.flagErr(fs, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	verb := ""
	if len(pos) > 0 {
		verb = pos[0]
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && f.Name != "config" && f.Name != "admin" && f.Name != "admin-token" && !slices.Contains(takes[verb], f.Name) {
			err = fmt.Errorf("%w: %s does not take --%s; run tollway help %s", ErrUsage, strings.TrimSpace(fs.Name()+" "+verb), f.Name, fs.Name())
		}
	})
	return pos, err
}

// negativeNumber is a word the flag package would take for a flag (-1, -0.5).
var negativeNumber = regexp.MustCompile(`^-[0-9]`)

// amountFlag checks a USD amount given on the command line before anything is sent.
func amountFlag(flagName, value string) error {
	if _, err := adminapi.ParseAmount(value); err != nil {
		return fmt.Errorf("%w: %s: %v; write it like %s 5 or %s 12.50", ErrUsage, flagName, err, flagName, flagName)
	}
	return nil
}

// csv splits a comma-separated flag value, trimming spaces.
func csv(s string) []string {
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// api is the admin API client for this command line: the URL from --admin or the config's
// listen.admin; the token from --admin-token, TOLLWAY_ADMIN_TOKEN or the config's admin.token.
func (c *cli) api() (*adminClient, error) {
	cl := &adminClient{base: c.admin, token: c.adminToken, http: &http.Client{Timeout: 30 * time.Second}}
	if cl.token == "" {
		cl.token = os.Getenv("TOLLWAY_ADMIN_TOKEN")
	}
	if cl.base == "" || (cl.token == "" && c.config != "") {
		cfg, err := config.Load(c.config)
		if err != nil {
			return nil, err
		}
		if cl.base == "" {
			cl.base = "http://" + cfg.Listen.Admin
		}
		if cl.token == "" {
			tok, err := cfg.AdminToken()
			if err != nil {
				cl.tokenHint = err.Error()
			}
			cl.token = tok
		}
	}
	cl.base = strings.TrimRight(cl.base, "/")
	return cl, nil
}

// call calls the admin API (api, then adminClient.call).
func (c *cli) call(ctx context.Context, method, path string, in, out any) error {
	api, err := c.api()
	if err != nil {
		return err
	}
	return api.call(ctx, method, path, in, out)
}

type adminClient struct {
	base, token string
	tokenHint   string // why the config's token could not be used, for a 401
	http        *http.Client
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
	req.Header.Set("content-type", "application/json") // the admin API refuses writes without it
	if c.token != "" {
		req.Header.Set("authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API %s: %w (is the gateway running? start it with `tollway run`)", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e adminapi.Error
		if json.Unmarshal(raw, &e) != nil || e.Error.Message == "" {
			return fmt.Errorf("admin API answered %d: %s", resp.StatusCode, raw)
		}
		if e.Error.Code == "invalid_admin_token" && c.tokenHint != "" {
			e.Error.Message += " (" + c.tokenHint + ")"
		}
		return fmt.Errorf("%s (%s)", e.Error.Message, e.Error.Code)
	}
	return json.Unmarshal(raw, out)
}

// pathEscape puts an id into an admin API path (model ids may hold '/').
func pathEscape(id string) string { return url.PathEscape(id) }
