// Package period turns a schedule — a cron expression, optionally with a
// CRON_TZ= time zone, a descriptor such as @daily, or @every DURATION —
// into periods: the instant the current period began and the instant the
// next one begins. Every replica computes the same periods from its own
// wall clock, so a period's start names it across replicas.
package period

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed schedule.
type Schedule struct {
	spec  string
	every time.Duration // @every: periods aligned to the Unix epoch
	cron  cron.Schedule
}

// Parse parses spec: five cron fields ("0 3 * * *"), optionally preceded
// by CRON_TZ=ZONE, a descriptor (@yearly, @monthly, @weekly, @daily,
// @hourly) or @every DURATION (at least one second).
func Parse(spec string) (Schedule, error) {
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		// robfig counts @every from whenever it is asked (and rounds
		// below a second up); periods must be the same on every replica,
		// so they are aligned to the Unix epoch here.
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Second {
			return Schedule{}, fmt.Errorf("schedule %q: @every wants a duration of at least 1s", spec)
		}
		return Schedule{spec: spec, every: every}, nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return Schedule{spec: spec, cron: s}, nil
}

// String is the spec as given.
func (s Schedule) String() string { return s.spec }

// Next is when the first period after t begins.
func (s Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.Truncate(s.every).Add(s.every)
	}
	return s.cron.Next(t)
}

// Current is when the period holding t began: the last start at or before
// t, or the zero time when none is found within the last 400 days (a
// schedule that fires rarer than that, or not yet).
func (s Schedule) Current(t time.Time) time.Time {
	if s.every > 0 {
		return t.Truncate(s.every)
	}
	// Look back further and further: a minute's schedule is found within
	// an hour, a yearly one within 400 days, with few steps either way.
	for _, back := range []time.Duration{time.Hour, 8 * 24 * time.Hour, 400 * 24 * time.Hour} {
		var last time.Time
		for n, steps := s.cron.Next(t.Add(-back)), 0; !n.IsZero() && !n.After(t) && steps < 1_000_000; n, steps = s.cron.Next(n), steps+1 {
			last = n
		}
		if !last.IsZero() {
			return last
		}
	}
	return time.Time{}
}
