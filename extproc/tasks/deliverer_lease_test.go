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
