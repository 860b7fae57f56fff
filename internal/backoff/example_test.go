package backoff_test

import (
	"fmt"
	"time"

	"github.com/opzero/opzero/internal/backoff"
)

// A Tracker retries a failing key after growing delays; a success cancels
// the pending retry. The fake clock makes the example instant.
func Example() {
	start := time.Unix(0, 0)
	clock := backoff.NewFakeClock(start)
	tr := backoff.NewTracker(backoff.Policy{Base: time.Second, Cap: 4 * time.Second}, clock, func(key string) {
		fmt.Printf("retry %s at +%s\n", key, clock.Now().Sub(start))
	})
	for range 4 {
		delay, attempt := tr.Failure("default/web")
		fmt.Printf("failure %d, retry in %s\n", attempt, delay)
		clock.Step(delay)
	}
	tr.Failure("default/web")
	tr.Success("default/web")
	clock.Step(time.Hour)
	fmt.Println("keys held:", tr.Len())
	// Output:
	// failure 0, retry in 1s
	// retry default/web at +1s
	// failure 1, retry in 2s
	// retry default/web at +3s
	// failure 2, retry in 4s
	// retry default/web at +7s
	// failure 3, retry in 4s
	// retry default/web at +11s
	// keys held: 0
}

func ExamplePolicy_Delay() {
	p := backoff.DefaultPolicy()
	for _, n := range []int{0, 1, 2, 8, 9, 1000} {
		fmt.Println(n, p.Delay(n))
	}
	// Output:
	// 0 1s
	// 1 2s
	// 2 4s
	// 8 4m16s
	// 9 5m0s
	// 1000 5m0s
}
