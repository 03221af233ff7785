package postgres

// Rate limits shared by replicas (store.RateShares): a row per owner and replica, its share
// granted under a transaction-scoped advisory lock of the owner, so two replicas' grants of
// one owner are never computed at once (locks taken in one order, each by a statement of its
// own before the grants: a statement sees what was committed before it began).

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollway/tollway/store"
)

var _ store.RateShares = (*Store)(nil)

// shareRate grants $2 its share of $1 (under the owner's lock, taken by a statement before it,
// so that it sees every grant committed before): at most what it asks ($3), what the others'
// live shares leave, and its proportion of what the live replicas ask when they ask for more
// than the whole.
const shareRate = `with others as (select coalesce(sum(want), 0)::bigint as wants, coalesce(sum(share), 0)::bigint as shares
           from rate_shares where id = $1 and replica <> $2 and expires_ns > $4),
granted as (select least($3::bigint, 1000000 - shares,
                         case when wants + $3 > 1000000 then $3 * 1000000 / (wants + $3) else $3 end) as share from others)
insert into rate_shares (id, replica, want, share, expires_ns)
select $1, $2, $3, greatest(share, 0), $5 from granted
on conflict (id, replica) do update set want = excluded.want, share = excluded.share, expires_ns = excluded.expires_ns
returning share`

// ShareRates renews replica's shares of the owners in wants, in one transaction.
func (s *Store) ShareRates(replica string, wants map[string]int64, now, expires time.Time) (map[string]int64, error) {
	ids := make([]string, 0, len(wants))
	for id, w := range wants {
		if id == "" || w < 0 || w > store.ShareWhole {
			return nil, store.Errorf(store.ErrInvalid, "share rates: owner %q asks for %d parts per million, not 0 to %d", id, w, store.ShareWhole)
		}
		ids = append(ids, id)
	}
	sort.Strings(ids) // locks taken in one order by every replica
	out := make(map[string]int64, len(ids))
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, id := range ids {
			b.Queue("select pg_advisory_xact_lock(hashtextextended('tollway.rate:' || $1, 0))", id)
		}
		b.Queue("delete from rate_shares where id = any($1) and expires_ns <= $2", ids, now.UnixNano())
		for _, id := range ids {
			b.Queue(shareRate, id, replica, wants[id], now.UnixNano(), expires.UnixNano()).QueryRow(func(row pgx.Row) error {
				var share int64
				err := row.Scan(&share)
				out[id] = share
				return err
			})
		}
		b.Queue("delete from rate_shares where replica = $1 and want = 0", replica)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
