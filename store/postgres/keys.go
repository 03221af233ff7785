package postgres

// API keys (only the SHA-256 of the secret, hex, as store.NewKey makes it) and accounts. Every
// write but a key's last use announces itself (TopicKeys, TopicAccounts) in its transaction.

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// num is d as NUMERIC, exactly (its coefficient and exponent).
func num(d decimal.Decimal) pgtype.Numeric {
	return pgtype.Numeric{Int: d.Coefficient(), Exp: d.Exponent(), Valid: true}
}

// numPtr is d as NUMERIC, NULL when nil.
func numPtr(d *decimal.Decimal) pgtype.Numeric {
	if d == nil {
		return pgtype.Numeric{}
	}
	return num(*d)
}

// dec is n as a decimal, exactly; NULL is zero.
func dec(n pgtype.Numeric) decimal.Decimal {
	if !n.Valid || n.Int == nil {
		return decimal.Zero
	}
	return decimal.NewFromBigInt(new(big.Int).Set(n.Int), n.Exp)
}

// decPtr is n as a decimal, nil when NULL.
func decPtr(n pgtype.Numeric) *decimal.Decimal {
	if !n.Valid {
		return nil
	}
	d := dec(n)
	return &d
}

// nsOf is t as unix nanoseconds, NULL when zero.
func nsOf(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ns := t.UnixNano()
	return &ns
}

func nsPtr(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	return nsOf(*t)
}

// timeOf is unix nanoseconds as a UTC time, zero when NULL.
func timeOf(ns *int64) time.Time {
	if ns == nil {
		return time.Time{}
	}
	return time.Unix(0, *ns).UTC()
}

func timePtr(ns *int64) *time.Time {
	if ns == nil {
		return nil
	}
	t := timeOf(ns)
	return &t
}

const keyColumns = "id, hash, prefix, account, name, created_ns, revoked_ns, monthly_limit, models, last_used_ns, rpm, tpm"

func scanKey(r pgx.CollectableRow) (store.Key, error) {
	var k store.Key
	var created, revoked, used *int64
	var limit pgtype.Numeric
	var rates store.RateLimits
	err := r.Scan(&k.ID, &k.Hash, &k.Prefix, &k.Account, &k.Name, &created, &revoked, &limit, &k.Models, &used,
		&rates.RequestsPerMinute, &rates.TokensPerMinute)
	k.CreatedAt, k.RevokedAt, k.MonthlyLimit, k.LastUsedAt = timeOf(created), timePtr(revoked), decPtr(limit), timePtr(used)
	k.RateLimits = rates.Norm()
	return k, err
}

func keys(ctx context.Context, q querier, where string, args ...any) ([]store.Key, error) {
	rows, err := q.Query(ctx, "select "+keyColumns+" from api_keys "+where, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanKey)
}

func putKey(ctx context.Context, tx pgx.Tx, k store.Key) error {
	var rates store.RateLimits
	if k.RateLimits != nil {
		rates = *k.RateLimits
	}
	_, err := tx.Exec(ctx, "insert into api_keys ("+keyColumns+") values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "+
		"on conflict (id) do update set hash = $2, prefix = $3, account = $4, name = $5, created_ns = $6, revoked_ns = $7, "+
		"monthly_limit = $8, models = $9, last_used_ns = $10, rpm = $11, tpm = $12",
		k.ID, k.Hash, k.Prefix, k.Account, k.Name, nsOf(k.CreatedAt), nsPtr(k.RevokedAt), numPtr(k.MonthlyLimit), k.Models, nsPtr(k.LastUsedAt),
		rates.RequestsPerMinute, rates.TokensPerMinute)
	return err
}

// keyTx is tx for a change of key id, announced with it.
func (s *Store) keyTx(id string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return s.notify(ctx, tx, store.TopicKeys, id)
	})
}

// GetKey reads one key; ErrNotFound if absent.
func (s *Store) GetKey(id string) (store.Key, error) {
	var ks []store.Key
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) (err error) {
		ks, err = keys(ctx, q, "where id = $1", id)
		return err
	})
	if err == nil && len(ks) == 0 {
		return store.Key{}, fmt.Errorf("key %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, err
	}
	return ks[0], nil
}

// Keys lists every key, oldest first.
func (s *Store) Keys() ([]store.Key, error) {
	var ks []store.Key
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) (err error) {
		ks, err = keys(ctx, q, `order by created_ns nulls first, id collate "C"`)
		return err
	})
	return ks, err
}

// PutKey stores a key record as it is.
func (s *Store) PutKey(k store.Key) error {
	return s.keyTx(k.ID, func(ctx context.Context, tx pgx.Tx) error { return putKey(ctx, tx, k) })
}

// CreateKey makes a key for an existing account and returns its record and its secret (shown
// once, never stored).
func (s *Store) CreateKey(account string, opts store.KeyOptions) (store.Key, string, error) {
	k, secret, err := store.NewKey(account, opts, time.Now())
	if err != nil {
		return store.Key{}, "", err
	}
	err = s.keyTx(k.ID, func(ctx context.Context, tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, "select 1 from accounts where id = $1 for share", account).Scan(&one); err == pgx.ErrNoRows {
			return store.AccountMissing(account)
		} else if err != nil {
			return err
		}
		return putKey(ctx, tx, k)
	})
	if err != nil {
		return store.Key{}, "", err
	}
	return k, secret, nil
}

// RevokeKey marks a key revoked.
func (s *Store) RevokeKey(id string) (store.Key, error) {
	return s.updateKey(id, func(k *store.Key) error { k.Revoke(time.Now()); return nil })
}

// RotateKey replaces a key's secret; the old one stops working.
func (s *Store) RotateKey(id string) (store.Key, string, error) {
	var secret string
	k, err := s.updateKey(id, func(k *store.Key) (err error) {
		secret, err = k.Rotate()
		return err
	})
	return k, secret, err
}

// ChangeKeyLimits changes the limits c names, under the key's row lock, so a change of one
// never undoes a concurrent change of another.
func (s *Store) ChangeKeyLimits(id string, c store.KeyLimitsChange) (store.Key, error) {
	if err := c.Check(); err != nil {
		return store.Key{}, err
	}
	return s.updateKey(id, c.Apply)
}

func (s *Store) updateKey(id string, fn func(*store.Key) error) (store.Key, error) {
	var k store.Key
	err := s.keyTx(id, func(ctx context.Context, tx pgx.Tx) error {
		ks, err := keys(ctx, tx, "where id = $1 for update", id)
		if err != nil {
			return err
		}
		if len(ks) == 0 {
			return fmt.Errorf("key %q: %w", id, store.ErrNotFound)
		}
		k = ks[0]
		if err := fn(&k); err != nil {
			return err
		}
		return putKey(ctx, tx, k)
	})
	return k, err
}

// SetKeysUsed records when keys were last used, in one statement: a time older than the
// stored one, and an unknown id, change nothing.
func (s *Store) SetKeysUsed(used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	ids, at := make([]string, 0, len(used)), make([]int64, 0, len(used))
	for id, t := range used {
		ids, at = append(ids, id), append(at, t.UTC().Truncate(time.Second).UnixNano())
	}
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "update api_keys k set last_used_ns = u.ns from unnest($1::text[], $2::bigint[]) u(id, ns) "+
			"where k.id = u.id and (k.last_used_ns is null or k.last_used_ns < u.ns)", ids, at)
		return err
	})
}

// accountTx is tx for a change of account id, announced with it.
func (s *Store) accountTx(id string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return s.notify(ctx, tx, store.TopicAccounts, id)
	})
}

func scanAccount(r pgx.CollectableRow) (store.Account, error) {
	var a store.Account
	var bal pgtype.Numeric
	var created int64
	err := r.Scan(&a.ID, &bal, &created)
	a.Balance, a.CreatedAt = dec(bal), timeOf(&created)
	return a, err
}

func accounts(ctx context.Context, q querier, sql string, args ...any) ([]store.Account, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanAccount)
}

// CreateAccount creates an account holding credits (ErrExists, ErrInvalid).
func (s *Store) CreateAccount(id string, credits decimal.Decimal) (store.Account, error) {
	a, err := store.NewAccount(id, credits, time.Now())
	if err != nil {
		return store.Account{}, err
	}
	err = s.accountTx(id, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "insert into accounts (id, balance, created_ns) values ($1, $2, $3) on conflict (id) do nothing",
			a.ID, num(a.Balance), a.CreatedAt.UnixNano())
		if err == nil && tag.RowsAffected() == 0 {
			return store.Errorf(store.ErrExists, "account %q already exists", id)
		}
		return err
	})
	if err != nil {
		return store.Account{}, err
	}
	return a, nil
}

// CreditAccount adds a positive amount to a balance.
func (s *Store) CreditAccount(id string, amount decimal.Decimal) (store.Account, error) {
	if err := store.CheckCredit(id, amount); err != nil {
		return store.Account{}, err
	}
	var as []store.Account
	err := s.accountTx(id, func(ctx context.Context, tx pgx.Tx) (err error) {
		as, err = accounts(ctx, tx, "update accounts set balance = balance + $2 where id = $1 returning id, balance, created_ns", id, num(amount))
		if err == nil && len(as) == 0 {
			return store.AccountNotFound(id)
		}
		return err
	})
	if err != nil {
		return store.Account{}, err
	}
	return as[0], nil
}

// GetAccount reads one account; ErrNotFound if absent.
func (s *Store) GetAccount(id string) (store.Account, error) {
	var as []store.Account
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) (err error) {
		as, err = accounts(ctx, q, "select id, balance, created_ns from accounts where id = $1", id)
		return err
	})
	if err == nil && len(as) == 0 {
		return store.Account{}, store.AccountNotFound(id)
	}
	if err != nil {
		return store.Account{}, err
	}
	return as[0], nil
}

// Accounts lists every account by id.
func (s *Store) Accounts() ([]store.Account, error) {
	var as []store.Account
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) (err error) {
		as, err = accounts(ctx, q, `select id, balance, created_ns from accounts order by id collate "C"`)
		return err
	})
	return as, err
}
