package trim

import (
	"testing"
	"time"
)

// TestSettle: the first trim once the start has settled, whatever the
// work; then one after each burst of work once it has been quiet for
// Quiet; none while work goes on, none when there was no work.
func TestSettle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := &Settle{After: 10 * time.Second, Quiet: 5 * time.Second}
	steps := []struct {
		sec  int
		work float64
		want bool
		why  string
	}{
		{0, 0, false, "the start"},
		{4, 3, false, "the start's work, before After"},
		{8, 7, false, "still before After"},
		{10, 9, true, "After since the first call: the first trim, though it works"},
		{12, 9, false, "quiet since the first trim: nothing to give back"},
		{40, 9, false, "still nothing done"},
		{42, 10, false, "work"},
		{45, 11, false, "work again: quiet only since 45"},
		{48, 11, false, "3 s quiet"},
		{50, 11, true, "5 s quiet after work"},
		{52, 11, false, "trimmed; nothing since"},
		{54, 12, false, "work"},
		{56, 13, false, "work"},
		{58, 14, false, "work"},
		{60, 15, false, "work goes on"},
		{64, 15, false, "4 s quiet"},
		{65, 15, true, "5 s quiet"},
		{200, 15, false, "no work since"},
	}
	for _, st := range steps {
		if got := s.Due(at(st.sec), st.work); got != st.want {
			t.Errorf("t=%ds work=%v (%s): Due = %v, want %v", st.sec, st.work, st.why, got, st.want)
		}
	}
}
