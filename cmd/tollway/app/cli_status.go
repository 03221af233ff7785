package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

const (
	reloadHelp = `  tollway reload                                      re-read the config file of the running gateway
`
	statusHelp = `  tollway status                                      configuration delivery status (versions pushed and accepted, last rejection)
`
)

func cmdReload(ctx context.Context, c *cli, args []string) error {
	return statusCall(ctx, c, "reload", http.MethodPost, "/admin/v1/reload", args)
}

func cmdStatus(ctx context.Context, c *cli, args []string) error {
	return statusCall(ctx, c, "status", http.MethodGet, "/admin/v1/status", args)
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
