package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/postgres"
)

// What the process holds: the store, its run directory and its listeners; and billing, which
// writes to the store from the request path.

// openStore opens the store store.driver names, follows its changes from now on (followed once
// the gateway runs: changes.go), registers this replica and bills the requests the last stop
// cut.
func (p *process) openStore(context.Context) error {
	st, err := p.open()
	if err != nil {
		return err
	}
	p.st = st
	var sub context.Context
	sub, p.unsubscribe = context.WithCancel(context.Background())
	p.changes = st.Subscribe(sub)
	p.replica = newReplica(p.cfg, p.log.With("component", "replicas"), st)
	others, err := p.replica.register()
	if err != nil {
		p.unsubscribe()
		st.Close()
		return err
	}
	// A hold has no owner yet: with others live, theirs are requests still being served.
	if others == 0 {
		settleCut(p.log.With("component", "ledger"), st)
	} else {
		p.log.Info("requests cut by an earlier stop are billed by a replica starting alone (other replicas are live)", "live", others)
	}
	p.stopPruning = store.StartPruning(st, store.PruneOptions{
		Retention:     time.Duration(p.cfg.Store.UsageRetentionDays) * 24 * time.Hour,
		TaskRetention: time.Duration(p.cfg.Store.TaskRetentionDays) * 24 * time.Hour,
		Log:           p.log.With("component", "store"),
	})
	return nil
}

// open opens store.driver's store: bbolt's file, watched for the disk filling (known within a
// second: a store that cannot make records durable refuses billable work), or the PostgreSQL
// database (its own health comes from each call and its listener).
func (p *process) open() (store.Store, error) {
	log := p.log.With("component", "store")
	if p.cfg.Store.Driver != config.StorePostgres {
		st, err := bbolt.Open(p.cfg.Store.Path)
		if err != nil {
			return nil, err
		}
		st.Watch(bbolt.HealthOptions{Reserve: bbolt.DefaultReserve, MinFree: bbolt.DefaultMinFree, Changed: storeChanged(log)})
		return st, nil
	}
	dsn, err := p.cfg.StoreDSN()
	if err != nil {
		return nil, err
	}
	st, err := postgres.Open(postgres.Options{DSN: dsn, Log: log})
	if err != nil {
		return nil, err // names host:port/db, never the password
	}
	log.Info("store: postgres", "at", config.DSNHost(dsn))
	return st, nil
}

func (p *process) closeStore() {
	p.unsubscribe()
	p.stopPruning()
	p.replica.leave()
	p.st.Close()
}

// makeRunDir makes the private directory the sockets and the bootstrap live in; unix sockets
// need no ports, so nothing collides with other gateways or tests on the machine.
func (p *process) makeRunDir(context.Context) error {
	dir, release, err := makeRunDir(p.log)
	if err != nil {
		return err
	}
	p.runDir, p.releaseDir = dir, release
	return nil
}

// removeRunDir removes the run directory and lets go of its lock.
func (p *process) removeRunDir() { p.releaseDir() }

// sock is the path of a socket or file in the run directory.
func (p *process) sock(name string) string { return filepath.Join(p.runDir, name) }

// listeners are the process's listeners, opened before anything serves so that a taken address
// stops the start. The servers close the ones they serve; close closes them all, so a start that
// fails later leaves none open.
type listeners struct {
	admin, xds, ext net.Listener
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.admin, l.xds, l.ext} {
		if ln != nil {
			_ = ln.Close() // closed already by the server that served it
		}
	}
}

// listen opens the admin, xDS and ext_proc listeners: unix sockets in the run directory for the
// child Envoy, TCP at listen.xds and listen.extproc for external ones. When one cannot be
// opened, those opened before it are closed.
func (p *process) listen(context.Context) (err error) {
	l := &p.listeners
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.admin, err = net.Listen("tcp", p.cfg.Listen.Admin); err != nil {
		return fmt.Errorf("listen.admin %s: %w (is another tollway running? change listen.admin)", p.cfg.Listen.Admin, err)
	}
	if !p.external {
		if err := portFree(p.cfg.Listen.Public); err != nil {
			return err
		}
	}
	xdsNet, xdsAddr, extNet, extAddr := "unix", p.sock("xds.sock"), "unix", p.sock("extproc.sock")
	if p.external {
		xdsNet, xdsAddr, extNet, extAddr = "tcp", p.cfg.Listen.XDS, "tcp", p.cfg.Listen.ExtProc
	}
	if l.xds, err = net.Listen(xdsNet, xdsAddr); err != nil {
		return fmt.Errorf("listen.xds %s: %w", xdsAddr, err)
	}
	if l.ext, err = net.Listen(extNet, extAddr); err != nil {
		return fmt.Errorf("listen.extproc %s: %w", extAddr, err)
	}
	return nil
}

func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen.public %s: %w (another process holds the port; change listen.public)", addr, err)
	}
	return ln.Close()
}

// startBilling loads the in-memory ledger from the store and starts the settler that makes
// settled requests durable; nothing when billing is off.
func (p *process) startBilling(context.Context) error {
	if !p.cfg.Billing.Enabled {
		return nil
	}
	log := p.log.With("component", "ledger")
	if pg, ok := p.st.(*postgres.Store); ok {
		// Before the ledger reads the balances: what the spool holds is in them then.
		sp, err := openSpool(log, p.cfg.SpoolPath(), pg)
		if err != nil {
			return err
		}
		p.spool, p.settle = sp, sp
	} else {
		p.settle = newSettler(log, p.st)
	}
	ledger, known, err := loadLedger(p.st, time.Now())
	if err != nil {
		p.settle.Close()
		return err
	}
	if _, err := p.useSlices(ledger); err != nil {
		return err
	}
	p.ledger, p.ledgerAccounts = ledger, known
	p.bill = newBilling(ledger, p.settle)
	return nil
}

// durable is the health billable work is admitted on: the spool's with driver postgres (the
// database being down does not stop what the spool can record), else the store's.
func (p *process) durable() store.Health {
	if p.spool != nil {
		return p.spool
	}
	return p.st
}

// stopBilling runs after the servers stopped: every settled request reaches the store.
func (p *process) stopBilling() {
	if p.settle != nil {
		p.settle.Close()
		p.returnSlices()
	}
}
