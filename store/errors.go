package store

import (
	"errors"
	"fmt"
)

// Sentinel errors: every implementation wraps one of them, so callers tell failures apart with
// errors.Is and map them to HTTP status at their own boundary.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	ErrInvalid  = errors.New("invalid")
	// ErrLocked: another process owns the store (a bbolt file is one process's).
	ErrLocked = errors.New("store is locked by another process")
	// ErrUnavailable wraps the failure of a write the store could not commit (not the fault of
	// what it wrote): trying again helps only once the store recovers (Health).
	ErrUnavailable = errors.New("store cannot commit")
	// ErrTaskNotFound: no task has the id.
	ErrTaskNotFound = errors.New("task not found")
	// ErrUsageNotSettled: the task was updated but its usage record was refused on its own
	// (invalid, or its account no longer exists); the error says why.
	ErrUsageNotSettled = errors.New("usage not settled")
)

// kindError carries a complete message and matches one sentinel with errors.Is, so that messages
// meant for operators do not end in ": not found".
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// Errorf is an error with the message format makes that matches kind (one of the sentinels)
// with errors.Is, without kind's text appended.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// RecordFault reports whether err is a usage record's own fault, so that trying it again cannot
// help: it is invalid or its account does not exist.
func RecordFault(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound)
}
