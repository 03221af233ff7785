package tasks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestTwoDeliverersSendEachCallbackOnce: two replicas' deliverers read one outbox; each of its
// 60 callbacks is sent once, by one of them, and the outbox empties.
func TestTwoDeliverersSendEachCallbackOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond) // both deliverers have read the outbox before the first ack
		mu.Lock()
		seen[r.Header.Get(DeliveryHeader)]++
		mu.Unlock()
	}))
	defer srv.Close()
	st, _, a := outbox(t, 60, srv.URL)
	b := &Deliverer{Store: st, Client: a.Client, Log: a.Log, Now: a.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, d := range []*Deliverer{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(ctx, 5*time.Millisecond) }()
	}
	for ctx.Err() == nil {
		if due, _ := st.DueCallbacks(time.Now().Add(time.Hour), 1); len(due) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	if len(seen) != 60 || twice != 0 {
		t.Fatalf("%d callbacks received, %d of them more than once; want 60, each once", len(seen), twice)
	}
}

// TestADeadDeliverersCallbackGoesOutAgainWithItsID: a replica that dies while its delivery is
// in flight (no answer, no acknowledgement) leaves the callback claimed; once its claim ends
// another replica sends it, with the same delivery id, and the outbox empties.
func TestADeadDeliverersCallbackGoesOutAgainWithItsID(t *testing.T) {
	var mu sync.Mutex
	var ids []string
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, r.Header.Get(DeliveryHeader))
		first := len(ids) == 1
		mu.Unlock()
		if first {
			<-hang // the first delivery never gets its answer: its sender dies meanwhile
		}
	}))
	defer srv.Close()
	defer close(hang)
	st, _, a := outbox(t, 1, srv.URL)
	a.Owner, a.Lease = "a", 300*time.Millisecond
	actx, die := context.WithCancel(context.Background())
	go a.Run(actx, 5*time.Millisecond)
	for n := 0; n == 0; {
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		n = len(ids)
		mu.Unlock()
	}
	die()
	died := time.Now()
	b := &Deliverer{Store: st, Client: a.Client, Log: a.Log, Now: a.Now, Owner: "b"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go b.Run(ctx, 5*time.Millisecond)
	for ctx.Err() == nil {
		if due, _ := st.DueCallbacks(time.Now().Add(time.Hour), 1); len(due) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] {
		t.Fatalf("deliveries %v, want the same id twice", ids)
	}
	if again := time.Since(died); again < 250*time.Millisecond {
		t.Fatalf("sent again %s after the death, before the claim of 300 ms ended", again)
	}
}
