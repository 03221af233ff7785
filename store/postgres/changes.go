package postgres

// Change propagation: a transaction that changes the catalog, a key or an account sends
// NOTIFY tollway_changes, '<origin> <topic>:<id>' before it commits; PostgreSQL delivers notifications
// at commit, in commit order, to every session listening, this process's included. Each Store
// keeps one connection of its own (not the pool's) listening and hands what it hears to its
// subscribers (store.Hub). Notifications sent while that connection is down are lost, so once
// it is back every subscriber is told to re-read every topic (a Change without an ID).

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollway/tollway/store"
)

const channel = "tollway_changes"

// topics are every topic, for a reload.
var topics = []store.Topic{store.TopicCatalog, store.TopicKeys, store.TopicAccounts}

// Subscribe tells of the catalog, key and account changes committed from now on by any
// process sharing the database (store.Changes).
func (s *Store) Subscribe(ctx context.Context) <-chan store.Change { return s.hub.Subscribe(ctx) }

// notify announces a change of topic (id "": many records) when tx commits, as
// '<origin> <topic>:<id>': the origin tells this Store's listener the change is its own
// (store.Change.Local), so the replica that made it need not apply it twice.
func (s *Store) notify(ctx context.Context, tx pgx.Tx, topic store.Topic, id string) error {
	_, err := tx.Exec(ctx, "select pg_notify($1, $2)", channel, s.origin+" "+string(topic)+":"+id)
	return err
}

// change reads a notification's payload; one without an origin (an older writer) is not Local.
func (s *Store) change(payload string) store.Change {
	origin, rest, ok := strings.Cut(payload, " ")
	if !ok {
		origin, rest = "", payload
	}
	topic, id, _ := strings.Cut(rest, ":")
	return store.Change{Topic: store.Topic(topic), ID: id, Local: origin == s.origin}
}

// listen connects the listener and starts it; the first LISTEN is in place when it returns,
// so a change committed after Open is heard.
func (s *Store) listen(ctx context.Context, cc *pgx.ConnConfig) error {
	conn, err := connectListener(ctx, cc)
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.listenLoop(lctx, cc, conn)
	return nil
}

func connectListener(ctx context.Context, cc *pgx.ConnConfig) (*pgx.Conn, error) {
	lc := cc.Copy()
	lc.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	conn, err := pgx.ConnectConfig(ctx, lc)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "listen "+channel+"; listen "+budgetChannel); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listenLoop hands each notification to the hub; a lost connection is an outage until it is
// back (tried again with growing pauses up to 2 s), then every topic is to be re-read.
func (s *Store) listenLoop(ctx context.Context, cc *pgx.ConnConfig, conn *pgx.Conn) {
	defer close(s.done)
	pause := 50 * time.Millisecond
	for {
		for conn == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, 2*time.Second)
			cctx, cancel := context.WithTimeout(ctx, s.opts.StatementTimeout)
			c, err := connectListener(cctx, cc)
			cancel()
			if err != nil {
				s.opts.Log.Warn("store: postgres listener cannot reconnect; trying again", "at", s.where, "error", err)
				continue
			}
			conn, pause = c, 50*time.Millisecond
			s.health.ok()
			for _, t := range topics {
				s.hub.Publish(store.Change{Topic: t})
			}
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			s.health.fail(err)
			s.opts.Log.Warn("store: postgres listener lost its connection; changes are re-read once it is back", "at", s.where, "error", err)
			continue
		}
		if n.Channel == budgetChannel {
			s.heardAsk(n.Payload)
			continue
		}
		s.hub.Publish(s.change(n.Payload))
	}
}
