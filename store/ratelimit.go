package store

// Rate limits shared by replicas (extproc/ratelimit): each replica holds a share of each
// limited owner's rates (a key's, a payer's on an endpoint), in parts per million, and admits
// at that share of them in memory. The store grants shares so that the live ones of an owner
// never add up to more than the whole, and splits the whole in proportion to what each replica
// asks for when they ask for more: a replica renews every share it holds at once, about once a
// second, so the store is never called per request.

import "time"

// ShareWhole is a whole rate in parts per million.
const ShareWhole = 1_000_000

// RateShares grant replicas shares of rate limits (a store several gateways share; a store of
// one gateway has none: its limiter holds the whole of every rate).
type RateShares interface {
	// ShareRates renews replica's shares of the owners in wants (owner -> the share it asks
	// for, 0 to ShareWhole; 0 gives its share up) until expires, and returns the share granted
	// each: at most what it asked for and what the other replicas' live shares leave, and when
	// the replicas together ask for more than the whole, about its proportion of what they ask
	// for (the others shrink to theirs as they renew). A share not renewed by its expiry is
	// free for the others. Times are the replicas' clocks, which must agree to well within a
	// second (NTP).
	ShareRates(replica string, wants map[string]int64, now, expires time.Time) (map[string]int64, error)
}
