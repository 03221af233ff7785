package bbolt

// Helpers shared by the store's tests.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/tollway/tollway/store"
)

// checkIndex asserts that every usage record has its idempotency index entry and every entry
// its record.
func checkIndex(t rapid.TB, s *Store) {
	t.Helper()
	if err := s.db.View(func(tx *bolt.Tx) error {
		usage, byReq := tx.Bucket(bucketUsage), tx.Bucket(bucketUsageByRequest)
		if err := usage.ForEach(func(k, _ []byte) error {
			if v := byReq.Get(k[8:]); !indexPointsAt(v, k) {
				return fmt.Errorf("record %q has no index entry (%x)", store.ShortID(string(k[8:])), v)
			}
			return nil
		}); err != nil {
			return err
		}
		return byReq.ForEach(func(id, v []byte) error {
			if len(v) < 8 || usage.Get(append(v[:8:8], id...)) == nil {
				return fmt.Errorf("index entry %q has no record", store.ShortID(string(id)))
			}
			return nil
		})
	}); err != nil {
		t.Error(err)
	}
}

// killDuring runs the test named helper in a child process with env added, hands each line it
// prints to onLine until that returns false, kills it (SIGKILL) and reopens the store at path,
// checking bbolt's consistency.
func killDuring(t *testing.T, helper, path string, env []string, onLine func(string) bool) *Store {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	more := true
	for more && sc.Scan() {
		more = onLine(sc.Text())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: the error is expected
	if more {
		t.Fatalf("%s exited before it was killed; stderr:\n%s", helper, stderr.String())
	}
	s, err := Open(path)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatalf("bbolt consistency check after kill -9: %v", err)
	}
	return s
}
