package keyq_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/opzero/opzero/internal/keyq"
)

// Events for a key whose reconcile is in progress fold into one follow-up
// reconcile, and each submitter learns the result of a reconcile that started
// after its event arrived.
func Example() {
	started, release := make(chan struct{}), make(chan struct{})
	q := keyq.New(keyq.Options{MaxConcurrent: 8}, func(ctx context.Context, key string, events []string) error {
		fmt.Printf("reconcile %s for %v\n", key, events)
		if events[0] == "created" {
			close(started)
			<-release // hold the first reconcile while more events arrive
		}
		return nil
	})

	first := q.Submit("default/web", "created")
	<-started
	var later []*keyq.Ticket
	for _, ev := range []string{"updated", "labelled", "scaled"} {
		later = append(later, q.Submit("default/web", ev))
	}
	close(release)

	ctx := context.Background()
	for _, t := range append(later, first) {
		if err := t.Wait(ctx); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("all handled; keys held:", q.Len())
	_ = q.Shutdown(ctx)
	// Output:
	// reconcile default/web for [created]
	// reconcile default/web for [updated labelled scaled]
	// all handled; keys held: 0
}

// A run's error reaches every ticket it serves; a panic is recovered and
// reported as the run's error.
func ExampleTicket_Err() {
	q := keyq.New(keyq.Options{}, func(ctx context.Context, key string, _ []int) error {
		if key == "broken" {
			panic("nil map")
		}
		return fmt.Errorf("%s: backend down", key)
	})
	t := q.Submit("flaky", 1)
	<-t.Done()
	fmt.Println(t.Err())

	var pe *keyq.PanicError
	fmt.Println(errors.As(q.Submit("broken", 1).Err(), &pe), pe.Value)
	// Output:
	// flaky: backend down
	// true nil map
}

// Shutdown refuses new work and waits for the runs in progress.
func ExampleQueue_Shutdown() {
	q := keyq.New(keyq.Options{}, func(context.Context, string, []int) error { return nil })
	if err := q.Shutdown(context.Background()); err != nil {
		fmt.Println(err)
	}
	fmt.Println(q.Submit("k", 1).Err())
	// Output:
	// keyq: shut down before the run started
}
