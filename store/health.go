package store

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Outage is why the store cannot make records durable now.
type Outage struct {
	// Cause is one of the Cause constants.
	Cause string
	Err   error // what the store found (the filesystem's error, the watcher's finding)
	Since time.Time
}

// Causes of an outage.
const (
	CauseDiskFull    = "disk full"
	CauseReadOnly    = "read-only filesystem"
	CauseIO          = "I/O error"
	CauseWriteFailed = "write failed"
	// CauseUnreachable: a shared store's database cannot be reached or refuses work.
	CauseUnreachable = "database unreachable"
)

// Error is the outage as a client may read it: the cause, never the store's location.
func (o *Outage) Error() string {
	what := map[string]string{
		CauseDiskFull: "its store's disk is full", CauseReadOnly: "its store's filesystem is read-only",
		CauseIO: "its store's disk fails with I/O errors", CauseUnreachable: "its store's database is unreachable",
	}[o.Cause]
	if what == "" {
		what = "writes to its store fail"
	}
	return fmt.Sprintf("the gateway cannot record usage durably: %s (since %s)", what, o.Since.UTC().Format(time.RFC3339))
}

// CauseOf names what a failed write says about the filesystem it went to (an Outage cause).
func CauseOf(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), strings.Contains(msg, "no space left on device"),
		strings.Contains(msg, "disk quota exceeded"):
		return CauseDiskFull
	case errors.Is(err, syscall.EROFS), strings.Contains(msg, "read-only file system"):
		return CauseReadOnly
	case errors.Is(err, syscall.EIO), strings.Contains(msg, "input/output error"):
		return CauseIO
	}
	return CauseWriteFailed
}
