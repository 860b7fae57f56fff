package keyq

import (
	"context"
	"fmt"
)

// Ticket completes when the run a submission joined has finished.
type Ticket struct {
	done chan struct{}
	err  error
}

func newTicket() *Ticket { return &Ticket{done: make(chan struct{})} }

func (t *Ticket) complete(err error) {
	t.err = err
	close(t.done)
}

// Done is closed when the run has finished.
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Err is the run's error; valid once Done is closed.
func (t *Ticket) Err() error {
	<-t.done
	return t.err
}

// Wait returns the run's error, or gives up when ctx ends (the run still
// happens).
func (t *Ticket) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("keyq: gave up waiting for the run: %w", ctx.Err())
	}
}
