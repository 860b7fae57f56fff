package controlplane

import "testing"

// TestPickPortsDistinct: the ports chosen in one call never repeat each other
// nor a port given, however often the kernel offers a port it just released.
func TestPickPortsDistinct(t *testing.T) {
	for round := 0; round < 50; round++ {
		given := 0
		if round%2 == 1 {
			v := make([]int, 1)
			if err := pickPorts(&v[0]); err != nil {
				t.Fatal(err)
			}
			given = v[0]
		}
		ports := make([]int, 8)
		ports[3] = given
		ptrs := make([]*int, len(ports))
		for i := range ports {
			ptrs[i] = &ports[i]
		}
		if err := pickPorts(ptrs...); err != nil {
			t.Fatal(err)
		}
		if ports[3] != given && given != 0 {
			t.Fatalf("a given port was replaced: %d -> %d", given, ports[3])
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if p == 0 || seen[p] {
				t.Fatalf("round %d: ports %v: zero or repeated", round, ports)
			}
			seen[p] = true
		}
	}
}
