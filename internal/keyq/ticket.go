package keyq

import (
	"context"
	"fmt"
)

// Ticket is a submission's receipt: it completes when the run the
// submission joined has finished, with that run's error.
type Ticket struct {
	done chan struct{}
	err  error // written once, before done is closed
}

func newTicket() *Ticket { return &Ticket{done: make(chan struct{})} }

func (t *Ticket) complete(err error) {
	t.err = err
	close(t.done)
}

// Done is closed when the run has finished (or will not happen: Err is then
// ErrShutdown).
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Err returns the run's error. It blocks until Done is closed.
func (t *Ticket) Err() error {
	<-t.done
	return t.err
}

// Wait returns the run's error, or gives up when ctx ends first and returns
// an error wrapping ctx.Err(). Giving up does not cancel the run.
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	default:
	}
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("keyq: gave up waiting for the run: %w", ctx.Err())
	}
}
