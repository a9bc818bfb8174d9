package fleet

import (
	"context"
	"image"
	"sync"
	"testing"
	"time"
)

// countingScreen is a ScreenSource whose screen is a number: each LiveFrame
// paints it (a grey of that level) and is counted.
type countingScreen struct {
	mu      sync.Mutex
	screen  int
	painted int
}

func (c *countingScreen) ScreenHash() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(rune('a' + c.screen))
}

func (c *countingScreen) LiveFrame(maxWidth int) (*image.RGBA, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.painted++
	img := image.NewRGBA(image.Rect(0, 0, maxWidth, maxWidth*2))
	for i := range img.Pix {
		img.Pix[i] = uint8(c.screen * 40)
	}
	return img, string(rune('a' + c.screen)), nil
}

func (c *countingScreen) change() {
	c.mu.Lock()
	c.screen++
	c.mu.Unlock()
}

func (c *countingScreen) paints() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.painted
}

// TestFeedSharedAndEncodedOnChange proves viewers of one device at one
// size share one feed, a still screen is encoded once however many turns
// and viewers there are, a changed screen is encoded once more and shows
// to every viewer under the next picture number, and the feed is dropped
// with its last viewer.
func TestFeedSharedAndEncodedOnChange(t *testing.T) {
	st := &Streams{feeds: map[feedKey]*screenFeed{}}
	src := &countingScreen{}
	key := feedKey{deviceID: "dev_1", width: 64, quality: 70}
	// A zero interval lets every turn look at the screen.
	a, b := st.join(key, src, 0), st.join(key, src, 0)
	if a != b || st.Feeds() != 1 {
		t.Fatalf("got %d feeds; want the viewers to share one", st.Feeds())
	}
	ctx := context.Background()
	first, err := a.frame(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		for _, f := range []*screenFeed{a, b} {
			got, err := f.frame(ctx)
			if err != nil || got.Seq != first.Seq {
				t.Fatalf("still screen: got picture %d, %v; want %d", got.Seq, err, first.Seq)
			}
		}
	}
	if got := src.paints(); got != 1 {
		t.Fatalf("still screen: got %d paintings; want 1", got)
	}

	src.change()
	// The turn that sees the change starts the encoding in the background
	// and still answers the last picture; a later turn shows the new one.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.frame(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq == first.Seq+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got picture %d 10s after the change; want %d", got.Seq, first.Seq+1)
		}
		time.Sleep(time.Millisecond)
	}
	if got, _ := a.frame(ctx); got.Seq != first.Seq+1 {
		t.Fatalf("other viewer: got picture %d; want %d", got.Seq, first.Seq+1)
	}
	if got := src.paints(); got != 2 {
		t.Fatalf("after one change: got %d paintings; want 2", got)
	}

	st.leave(a)
	if st.Feeds() != 1 {
		t.Fatalf("after one viewer left: got %d feeds; want 1", st.Feeds())
	}
	st.leave(b)
	if st.Feeds() != 0 {
		t.Fatalf("after the last viewer left: got %d feeds; want 0", st.Feeds())
	}
}
