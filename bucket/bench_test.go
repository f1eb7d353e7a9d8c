package bucket

import (
	"testing"
	"time"
)

func BenchmarkStep(b *testing.B) {
	p, _ := Compile(Limit{Capacity: 1e9, Rate: 1e9})
	var tat int64
	d := int64(0)
	for b.Loop() {
		d += 30
		tat, _ = p.Step(tat, Instant{Elapsed: d}, 1)
	}
}

func BenchmarkDecide(b *testing.B) {
	bk, _ := New(Limit{Capacity: 1e9, Rate: 1e9})
	d := int64(0)
	for b.Loop() {
		d += 30
		bk.decide(d, 1)
	}
}

func BenchmarkSince(b *testing.B) {
	t0 := time.Now()
	var s time.Duration
	for b.Loop() {
		s += time.Since(t0)
	}
	_ = s
}

func BenchmarkUnits(b *testing.B) {
	p, _ := Compile(Limit{Capacity: 1e9, Rate: 1e9 / 7})
	var s int64
	d := int64(0)
	for b.Loop() {
		d += 30
		v, _ := p.units(Instant{Elapsed: d})
		s += v
	}
	_ = s
}

func BenchmarkNanos(b *testing.B) {
	p, _ := Compile(Limit{Capacity: 1e9, Rate: 1e9 / 7})
	var s int64
	d := int64(0)
	for b.Loop() {
		d += 30
		v, _ := p.Nanos(d, 0)
		s += v
	}
	_ = s
}
