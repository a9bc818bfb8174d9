package backends

import (
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
	"phonefleet/testutil/cputime"
)

// benchObserve measures one budget of Observe on the Settings list, as an
// agent asks for it (pfbench's observe section cycles screens; here the
// screen stays, which the budgets below never cache).
func benchObserve(b *testing.B, opts domain.ObserveOptions) {
	p, err := sim.New("Pixel7", "BENCH-OBSERVE1")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.OpenApp(sim.PkgSettings); err != nil {
		b.Fatal(err)
	}
	s := newSimDevice(p)
	defer cputime.Report(b)()
	for b.Loop() {
		if _, err := s.Observe(bg, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// interactiveMarks numbers the interactive elements, as the REST and MCP
// surfaces' default set-of-marks does.
func interactiveMarks(root domain.UIElement) []domain.Mark {
	els := domain.CompactElements(root, true)
	out := make([]domain.Mark, len(els))
	for i, e := range els {
		out[i] = domain.Mark{N: i + 1, Ref: e.Ref, Bounds: e.Bounds}
	}
	return out
}

func BenchmarkObserveJPEG768(b *testing.B) {
	benchObserve(b, domain.ObserveOptions{Image: true, MaxWidth: 768, Format: domain.ImageJPEG})
}

func BenchmarkObserveMarksJPEG768(b *testing.B) {
	benchObserve(b, domain.ObserveOptions{Image: true, MaxWidth: 768, Format: domain.ImageJPEG, Marks: interactiveMarks})
}
