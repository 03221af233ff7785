package bbolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

const credKey = "x402/exact/eip155:31337/0xe7f1725e7734ce288f8367e1bb143e90bb3f0512/0x70997970c51812dc3a010c7d01b50e0d17dc79c8/0x" +
	"6e6f6e63656e6f6e63656e6f6e63656e6f6e63656e6f6e63656e6f6e63656e6f"

func TestClaimCredentialConcurrentOnce(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	until := time.Now().Add(time.Minute)
	var ok, used atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			switch err := s.ClaimCredential(credKey, until); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrExists):
				used.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok.Load() != 1 || used.Load() != 49 {
		t.Fatalf("50 concurrent claims: %d succeeded, %d found it used; want 1 and 49", ok.Load(), used.Load())
	}
}

func TestClaimCredentialSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimCredential(credKey, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ClaimCredential(credKey, time.Now().Add(time.Minute)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("claim after reopen: %v, want ErrExists", err)
	}
	if err := s.ClaimCredential(credKey+"1", time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("another credential: %v", err)
	}
}

func TestClaimCredentialRefusesBadInput(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		key   string
		until time.Time
	}{{"", time.Now()}, {string(make([]byte, maxCredentialKey+1)), time.Now()}, {"k", time.Time{}}} {
		if err := s.ClaimCredential(c.key, c.until); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ClaimCredential(%d-byte key, %v) = %v, want ErrInvalid", len(c.key), c.until, err)
		}
	}
}

func TestPruneCredentialsOnlyExpired(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	// 7 expired (kept until before now), 5 still kept.
	for i := range 12 {
		until := now.Add(time.Duration(i-7)*time.Minute - time.Second)
		if i >= 7 {
			until = now.Add(time.Duration(i-6) * time.Minute)
		}
		if err := s.ClaimCredential(fmt.Sprintf("cred-%02d", i), until); err != nil {
			t.Fatal(err)
		}
	}
	// Chunks of 3: 3, 3, 1 (fewer than the limit: none left).
	var got []int
	for {
		res, err := s.PruneCredentials(now, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Deleted)
		if res.Deleted < 3 {
			break
		}
	}
	if fmt.Sprint(got) != "[3 3 1]" {
		t.Fatalf("pruning in chunks of 3 deleted %v, want [3 3 1]", got)
	}
	for i := range 12 {
		err := s.ClaimCredential(fmt.Sprintf("cred-%02d", i), now.Add(time.Hour))
		if expired := i < 7; expired != (err == nil) {
			t.Errorf("cred-%02d after pruning: claim = %v (expired %v: only expired ones may be claimable again)", i, err, expired)
		}
	}
	if res, err := s.PruneCredentials(now, 100); err != nil || res.Deleted != 0 {
		t.Fatalf("second prune: %+v %v, want nothing deleted", res, err)
	}
}

const claimCrashEnv = "TOLLWAY_CLAIM_CRASH_DB"

// TestClaimCrashHelper is the child of TestClaimCredentialSurvivesKill; run normally it does
// nothing. It claims credentials one by one and prints "claimed KEY" once each claim returned.
func TestClaimCrashHelper(t *testing.T) {
	path := os.Getenv(claimCrashEnv)
	if path == "" {
		return
	}
	s, err := Open(path)
	if err != nil {
		os.Exit(3)
	}
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s-%d", credKey, i)
		if err := s.ClaimCredential(key, time.Now().Add(time.Hour)); err != nil {
			os.Exit(4)
		}
		fmt.Printf("claimed %s\n", key)
	}
}

// TestClaimCredentialSurvivesKill: a claim that returned is on disk, whatever kills the process
// right after (the business call runs only after the claim returned).
func TestClaimCredentialSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claim.db")
	var acked []string
	s := killDuring(t, "TestClaimCrashHelper", path, []string{claimCrashEnv + "=" + path}, func(line string) bool {
		if k, ok := strings.CutPrefix(line, "claimed "); ok {
			acked = append(acked, k)
		}
		return len(acked) < 20
	})
	defer s.Close()
	for _, k := range acked {
		if err := s.ClaimCredential(k, time.Now().Add(time.Hour)); !errors.Is(err, store.ErrExists) {
			t.Fatalf("claim of %s acknowledged before kill -9: claiming again gives %v, want ErrExists", k[len(k)-4:], err)
		}
	}
}
