package harness

import "testing"

// TestFreeAddrsAreDistinct: the ports a gateway is started on are chosen together, so the
// kernel cannot hand out the same one twice (a freed port is often the next one it gives).
func TestFreeAddrsAreDistinct(t *testing.T) {
	for range 20 {
		addrs, err := FreeAddrs(4)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("FreeAddrs gave %s twice: %v", a, addrs)
			}
			seen[a] = true
		}
	}
}
