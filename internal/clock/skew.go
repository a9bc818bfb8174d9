//go:build chaosclock

package clock

import (
	"fmt"
	"os"
	"time"
)

// EnvSkew is the environment variable a chaosclock build reads its offset
// from (a Go duration such as 4s or -4s). No other build reads it: it is a
// fault the chaos suite injects, not a setting.
const EnvSkew = "PHONEFLEET_CHAOS_CLOCK_SKEW"

func init() {
	v := os.Getenv(EnvSkew)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: want a Go duration such as 4s or -4s\n", EnvSkew, v)
		os.Exit(2)
	}
	offset = d
}
