package main

import (
	"slices"
	"testing"
	"time"
)

func TestLagKeepsARemovedInstanceListed(t *testing.T) {
	r := &registry{lastSeen: map[string]time.Time{}}
	t0 := time.Unix(1000, 0)
	if got, changed := r.update([]string{"10.244.1.2", "10.244.1.3"}, t0, 5*time.Second); !changed || !slices.Equal(got, []string{"10.244.1.2", "10.244.1.3"}) {
		t.Fatalf("first sync: %v %v", got, changed)
	}
	// .3 is no longer ready: listed for the lag, then dropped.
	if got, changed := r.update([]string{"10.244.1.2", "10.244.1.4"}, t0.Add(4*time.Second), 5*time.Second); !changed || !slices.Equal(got, []string{"10.244.1.2", "10.244.1.3", "10.244.1.4"}) {
		t.Fatalf("within the lag: %v %v", got, changed)
	}
	if got, changed := r.update([]string{"10.244.1.2", "10.244.1.4"}, t0.Add(6*time.Second), 5*time.Second); !changed || !slices.Equal(got, []string{"10.244.1.2", "10.244.1.4"}) {
		t.Fatalf("after the lag: %v %v", got, changed)
	}
	if _, changed := r.update([]string{"10.244.1.4", "10.244.1.2"}, t0.Add(7*time.Second), 5*time.Second); changed {
		t.Fatal("same set reported as a change")
	}
	// Without lag a removal shows at the next sync.
	r2 := &registry{lastSeen: map[string]time.Time{}}
	r2.update([]string{"a", "b"}, t0, 0)
	if got, _ := r2.update([]string{"a"}, t0.Add(time.Second), 0); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("no lag: %v", got)
	}
}
