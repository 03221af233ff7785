package gateway

// This file owns the gateway's in-process demo model server (package demo): started the first
// time an applied configuration names a provider of type demo, stopped with the gateway.

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tollway/tollway/cmd/tollway/demo"
	"github.com/tollway/tollway/extproc/tasks"
)

// demoChunkDelay paces streamed demo answers so a terminal shows them arriving.
const demoChunkDelay = 30 * time.Millisecond

// demoServer starts the demo model server on first use and keeps one for the gateway's life:
// a configuration change that drops the demo provider leaves it idle on its loopback port.
type demoServer struct {
	log *slog.Logger
	own *tasks.Listeners // the gateway's own listeners (callbacks never reach them); may be nil
	mu  sync.Mutex
	srv *demo.Server
}

// addr is the server's host:port, starting it if needed (a demoEndpoint).
func (d *demoServer) addr() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.srv == nil {
		srv, err := demo.Start(demo.Options{ChunkDelay: demoChunkDelay})
		if err != nil {
			return "", err
		}
		d.srv = srv
		if d.own != nil {
			d.own.Set(ownDemo, listenAddrs(srv.Addr())...)
		}
		d.log.Info("demo model server started", "addr", srv.Addr())
	}
	return d.srv.Addr(), nil
}

// close stops the server if it was started.
func (d *demoServer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.srv != nil {
		_ = d.srv.Close()
	}
}
