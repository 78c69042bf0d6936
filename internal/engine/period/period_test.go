package period

import (
	"testing"
	"time"
)

func TestPeriodsOfACronScheduleInItsTimeZone(t *testing.T) {
	s, err := Parse("CRON_TZ=Europe/Berlin 0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, berlin)
	if got, want := s.Current(now), time.Date(2026, 12, 3, 3, 0, 0, 0, berlin); !got.Equal(want) {
		t.Errorf("Current = %v, want %v", got, want)
	}
	if got, want := s.Next(now), time.Date(2026, 12, 4, 3, 0, 0, 0, berlin); !got.Equal(want) {
		t.Errorf("Next = %v, want %v", got, want)
	}
	at := time.Date(2026, 12, 3, 3, 0, 0, 0, berlin)
	if got := s.Current(at); !got.Equal(at) {
		t.Errorf("Current at the start of a period = %v, want that start", got)
	}
}

func TestEveryIsAlignedSoAllReplicasAgree(t *testing.T) {
	s, err := Parse("@every 10m")
	if err != nil {
		t.Fatal(err)
	}
	a := time.Date(2026, 12, 3, 12, 7, 1, 0, time.UTC)
	b := a.Add(2 * time.Minute)
	if !s.Current(a).Equal(s.Current(b)) || !s.Current(a).Equal(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("Current: %v and %v, want both 12:00", s.Current(a), s.Current(b))
	}
	if got := s.Next(a); !got.Equal(time.Date(2026, 12, 3, 12, 10, 0, 0, time.UTC)) {
		t.Errorf("Next = %v", got)
	}
}

func TestRareSchedulesAndDescriptors(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for spec, want := range map[string]time.Time{
		"@daily":    time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
		"@monthly":  time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		"@yearly":   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		"* * * * *": time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC),
	} {
		s, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Current(now); !got.Equal(want) {
			t.Errorf("%s: Current = %v, want %v", spec, got, want)
		}
	}
}

func TestBadSchedulesAreRefused(t *testing.T) {
	for _, spec := range []string{"", "61 * * * *", "@every 10ms", "CRON_TZ=Mars/Olympus 0 3 * * *", "@fortnightly"} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%q) = nil error", spec)
		}
	}
}
