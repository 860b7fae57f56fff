package main

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestForEachVisitsEveryIndexOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	if err := forEach(context.Background(), 4, 3, 103, func(_ context.Context, i int) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 100 {
		t.Fatalf("visited %d indexes, want 100", len(seen))
	}
	for i := 3; i < 103; i++ {
		if seen[i] != 1 {
			t.Fatalf("index %d visited %d times, want 1", i, seen[i])
		}
	}
}

func TestForEachReturnsTheErrorAndStops(t *testing.T) {
	boom := errors.New("boom")
	var mu sync.Mutex
	calls := 0
	err := forEach(context.Background(), 1, 0, 1000, func(ctx context.Context, i int) error {
		mu.Lock()
		calls++
		mu.Unlock()
		if i == 5 {
			return boom
		}
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if calls >= 1000 {
		t.Fatalf("%d calls after the error, want the rest cancelled", calls)
	}
}
