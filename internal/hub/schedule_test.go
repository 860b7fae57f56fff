package hub

import (
	"strings"
	"testing"
)

// TestScheduleThatNeverFires: a schedule no date matches is refused when
// parsed (the Subscription gets InvalidSchedule), as @every is; before, cron
// gave the zero time as its next tick and the sweeper sent ticks in a loop.
func TestScheduleThatNeverFires(t *testing.T) {
	for _, s := range []string{"*/10 * * * *", "17 */6 * * *", "0 0 29 2 *", "CRON_TZ=Europe/Paris 0 3 * * *", "@hourly"} {
		if _, err := parseSchedule(s); err != nil {
			t.Errorf("parseSchedule(%q): %v", s, err)
		}
	}
	for s, want := range map[string]string{"0 0 30 2 *": "never fires", "0 0 31 4 *": "never fires", "@every 1m": "@every"} {
		if _, err := parseSchedule(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseSchedule(%q): %v, want an error saying %q", s, err, want)
		}
	}
}
