package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/shopspring/decimal"
)

// Key is an API key record. Only the SHA-256 of the secret is stored.
type Key struct {
	ID        string     `json:"id"`
	Hash      string     `json:"hash"`
	Prefix    string     `json:"prefix"` // first characters of the secret, to recognise a key in lists
	Account   string     `json:"account"`
	Name      string     `json:"name,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// MonthlyLimit caps the key's spend per UTC calendar month; nil means no limit.
	MonthlyLimit *decimal.Decimal `json:"monthly_limit,omitempty"`
	// Models the key may use (catalog model ids or route names); nil or empty means all.
	Models []string `json:"models,omitempty"`
	// RateLimits caps the key's requests and tokens per minute; nil, or a rate left unset, means
	// the configuration's default for it (keys.rate_limits), which may be no limit.
	RateLimits *RateLimits `json:"rate_limits,omitempty"`
	// LastUsedAt is when the key last authenticated a request, to the second, as the gateway
	// last saved it (at most once a minute: SetKeysUsed); nil: never.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// KeyPrefix starts every API key, as the spec writes them: ale-<key>.
const KeyPrefix = "ale-"

// A key body is 32 bytes of randomness in unpadded base64url (43 characters): too much entropy
// to brute-force, so a plain SHA-256 is the right storage hash (no slow KDF needed).
var keyFormat = regexp.MustCompile(`^ale-[A-Za-z0-9_-]{43}$`)

// WellFormedKey reports whether s has the shape of a Tollway API key.
func WellFormedKey(s string) bool { return keyFormat.MatchString(s) }

// HashKey is the stored form of a key secret.
func HashKey(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: key randomness: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: id randomness: %w", err)
	}
	return "key_" + hex.EncodeToString(b[:]), nil
}

func withSecret(k Key, secret string) Key {
	h := HashKey(secret)
	k.Hash = hex.EncodeToString(h[:])
	k.Prefix = secret[:len(KeyPrefix)+6]
	return k
}

// KeyOptions are the settings of a new key.
type KeyOptions struct {
	Name string
	// MonthlyLimit caps the key's spend per UTC calendar month; nil means no limit. Must be >= 0.
	MonthlyLimit *decimal.Decimal
	// Models restricts the key to these model ids or route names; nil or empty means all.
	Models []string
	// RateLimits caps the key's requests and tokens per minute; nil: the configuration's default.
	RateLimits *RateLimits
}

// RateLimits are a key's rates: requests and tokens (prompt and completion) per minute. A nil
// rate is not set: the configuration's default applies to it (keys.rate_limits), none if it has
// none. A set rate is at least 1.
type RateLimits struct {
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty" mapstructure:"requests_per_minute"`
	TokensPerMinute   *int64 `json:"tokens_per_minute,omitempty" mapstructure:"tokens_per_minute"`
}

// MaxRate bounds a rate per minute: a billion a minute is past any provider's own.
const MaxRate = 1_000_000_000

// RateOutOfRange is a rate set below 1 or above MaxRate: its field's name and its value.
type RateOutOfRange struct {
	Field string
	Value int64
}

// OutOfRange lists r's rates set below 1 or above MaxRate (the one range check; each caller
// words its own message).
func (r *RateLimits) OutOfRange() []RateOutOfRange {
	if r == nil {
		return nil
	}
	var out []RateOutOfRange
	for _, f := range []struct {
		name string
		v    *int64
	}{{"requests_per_minute", r.RequestsPerMinute}, {"tokens_per_minute", r.TokensPerMinute}} {
		if f.v != nil && (*f.v < 1 || *f.v > MaxRate) {
			out = append(out, RateOutOfRange{f.name, *f.v})
		}
	}
	return out
}

// Check refuses a rate below 1 or above MaxRate (ErrInvalid), naming its field.
func (r *RateLimits) Check() error {
	if bad := r.OutOfRange(); len(bad) > 0 {
		return Errorf(ErrInvalid, "rate_limits.%s %d: must be a whole number from 1 to %d, or null for no limit", bad[0].Field, bad[0].Value, MaxRate)
	}
	return nil
}

// Norm is r with nothing set as nil, and copied, so a key record never shares it.
func (r *RateLimits) Norm() *RateLimits {
	if r == nil || (r.RequestsPerMinute == nil && r.TokensPerMinute == nil) {
		return nil
	}
	out := RateLimits{}
	if r.RequestsPerMinute != nil {
		n := *r.RequestsPerMinute
		out.RequestsPerMinute = &n
	}
	if r.TokensPerMinute != nil {
		n := *r.TokensPerMinute
		out.TokensPerMinute = &n
	}
	return &out
}

// NewKey makes the record of a new key for account, and its secret (shown once, never
// stored), checking opts; an implementation's CreateKey stores it once the account is found.
// Invalid options wrap ErrInvalid.
func NewKey(account string, opts KeyOptions, now time.Time) (Key, string, error) {
	if account == "" {
		return Key{}, "", Errorf(ErrInvalid, "store: a key needs an account")
	}
	if err := ValidAccountID(account); err != nil {
		return Key{}, "", err
	}
	var limit *decimal.Decimal
	if opts.MonthlyLimit != nil {
		if opts.MonthlyLimit.Sign() < 0 {
			return Key{}, "", Errorf(ErrInvalid, "monthly limit %s is negative", opts.MonthlyLimit)
		}
		l := *opts.MonthlyLimit
		limit = &l
	}
	models, err := modelList(opts.Models)
	if err != nil {
		return Key{}, "", err
	}
	if err := opts.RateLimits.Check(); err != nil {
		return Key{}, "", err
	}
	id, err := newID()
	if err != nil {
		return Key{}, "", err
	}
	secret, err := newSecret()
	if err != nil {
		return Key{}, "", err
	}
	return withSecret(Key{
		ID: id, Account: account, Name: opts.Name, CreatedAt: now.UTC(),
		MonthlyLimit: limit, Models: models, RateLimits: opts.RateLimits.Norm(),
	}, secret), secret, nil
}

// AccountMissing is the error of a key created for an account that does not exist: it says how
// to create it.
func AccountMissing(account string) error {
	return Errorf(ErrNotFound, "account %q does not exist; create it with: tollway accounts create %s --credits N", account, account)
}

// modelList is a key's model list without repeats; an empty id wraps ErrInvalid.
func modelList(ms []string) ([]string, error) {
	var list []string
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		if m == "" {
			return nil, Errorf(ErrInvalid, "a key's model list has an empty model id")
		}
		if !seen[m] {
			seen[m] = true
			list = append(list, m)
		}
	}
	return list, nil
}

// Revoke marks k revoked at now, unless it already is.
func (k *Key) Revoke(now time.Time) {
	if k.RevokedAt == nil {
		at := now.UTC()
		k.RevokedAt = &at
	}
}

// Rotate gives k a new secret, keeping its id, account and name, and returns the secret; a
// revoked key wraps ErrInvalid.
func (k *Key) Rotate() (string, error) {
	if k.RevokedAt != nil {
		return "", Errorf(ErrInvalid, "key %q is revoked; create a new key instead", k.ID)
	}
	secret, err := newSecret()
	if err != nil {
		return "", err
	}
	*k = withSecret(*k, secret)
	return secret, nil
}

// KeyLimitsChange says which of a key's limits change: a setting whose Set flag is false is kept.
type KeyLimitsChange struct {
	SetMonthlyLimit bool
	MonthlyLimit    *decimal.Decimal // nil: no limit
	SetModels       bool
	Models          []string // empty: every model
	// RatesChange changes the key's rates (a rate unset: the configuration's default then
	// applies).
	RatesChange
}

// RatesChange says which rates of a key or a route change, as a JSON merge patch of its
// rate_limits would: a rate whose Set flag is false is kept, one set to nil is unset. The
// store applies it inside its own transaction, so two changes of different rates made at the
// same moment (on different replicas, say) both take effect.
type RatesChange struct {
	SetRequestsPerMinute, SetTokensPerMinute bool
	RequestsPerMinute, TokensPerMinute       *int64
}

// Check refuses a rate out of range (ErrInvalid).
func (c RatesChange) Check() error {
	return (&RateLimits{RequestsPerMinute: c.RequestsPerMinute, TokensPerMinute: c.TokensPerMinute}).Check()
}

// Apply is r with c's changes (nil: no rate set), never sharing r's values.
func (c RatesChange) Apply(r *RateLimits) *RateLimits {
	out := r.Norm()
	if out == nil {
		out = &RateLimits{}
	}
	if c.SetRequestsPerMinute {
		out.RequestsPerMinute = c.RequestsPerMinute
	}
	if c.SetTokensPerMinute {
		out.TokensPerMinute = c.TokensPerMinute
	}
	return out.Norm()
}

// Check refuses a change no key may take (ErrInvalid), before any key is read.
func (c KeyLimitsChange) Check() error {
	if c.MonthlyLimit != nil && c.MonthlyLimit.Sign() < 0 {
		return Errorf(ErrInvalid, "monthly limit %s is negative", c.MonthlyLimit)
	}
	if _, err := modelList(c.Models); err != nil {
		return err
	}
	return c.RatesChange.Check()
}

// Apply changes k's limits as c says. A revoked key's limits cannot change (ErrInvalid).
func (c KeyLimitsChange) Apply(k *Key) error {
	list, err := modelList(c.Models)
	if err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	if k.RevokedAt != nil {
		return Errorf(ErrInvalid, "key %q is revoked; its limits cannot change (create a new key instead)", k.ID)
	}
	if c.SetMonthlyLimit {
		k.MonthlyLimit = nil
		if c.MonthlyLimit != nil {
			l := *c.MonthlyLimit
			k.MonthlyLimit = &l
		}
	}
	if c.SetModels {
		k.Models = list
	}
	k.RateLimits = c.RatesChange.Apply(k.RateLimits)
	return nil
}
