package main

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// forEach calls f for each i in [from, to) on workers goroutines; the first
// error cancels the rest and is returned.
func forEach(ctx context.Context, workers, from, to int, f func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := from; i < to && ctx.Err() == nil; i++ {
		g.Go(func() error { return f(ctx, i) })
	}
	return g.Wait()
}
