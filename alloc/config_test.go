package alloc

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want func(c *Config)
	}{
		{"", func(c *Config) {}},
		{"expandable_segments:True", func(c *Config) { c.ExpandableSegments = true }},
		{" expandable_segments : False ,", func(c *Config) {}},
		{"max_split_size_mb:256,max_non_split_rounding_mb:64", func(c *Config) { c.MaxSplitSize, c.MaxNonSplitRounding = 256*mib, 64*mib }},
		{"roundup_power2_divisions:4", func(c *Config) {
			for i := range c.RoundupDivisions {
				c.RoundupDivisions[i] = 4
			}
		}},
		{"roundup_power2_divisions:[256:1,512:2,>:8]", func(c *Config) {
			c.RoundupDivisions = [16]int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8}
		}},
		{"garbage_collection_threshold:0.6", func(c *Config) { c.GCThreshold = 0.6 }},
		{"backend:cudaMallocAsync", func(c *Config) { c.Backend = "cudaMallocAsync" }},
		{"release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:8", func(c *Config) {
			c.ReleaseLockOnMalloc, c.PinnedUseHostRegister, c.PinnedNumRegisterThreads = true, true, 8
		}},
		{"pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,graph_capture_record_stream_reuse:True", func(c *Config) {
			c.PinnedUseBackgroundThreads, c.PinnedReserveSegmentMB, c.GraphCaptureRecordStream = true, 64, true
		}},
		{"large_segment_size_mb:40", func(c *Config) { c.LargeSegment = 40 * mib }},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			want := Default()
			want.Source = tt.in
			tt.want(&want)
			if got != want {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, key, msg string }{
		{"x:1", "x", "unknown key"},
		{"expandable_segments:true", "expandable_segments", "True or False"},
		{"expandable_segments", "expandable_segments", "missing value"},
		{"expandable_segments=True", "expandable_segments=True", "unknown key"},
		{"max_split_size_mb:10", "max_split_size_mb", "too small"},
		{"max_split_size_mb:-100", "max_split_size_mb", "unsigned"},
		{"max_split_size_mb:1e3", "max_split_size_mb", "unsigned"},
		{"roundup_power2_divisions:3", "roundup_power2_divisions", "power of 2"},
		{"roundup_power2_divisions:[256:3]", "roundup_power2_divisions", "power of 2"},
		{"roundup_power2_divisions:[300:2]", "roundup_power2_divisions", "power of 2"},
		{"roundup_power2_divisions:[256:2", "roundup_power2_divisions", "]"},
		{"garbage_collection_threshold:1.0", "garbage_collection_threshold", "(0.0, 1.0)"},
		{"backend:foo", "backend", "unknown backend"},
		{"pinned_num_register_threads:3", "pinned_num_register_threads", "power of 2"},
		{"pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb", "greater than 0"},
		{"expandable_segments:True;max_split_size_mb:100", "expandable_segments", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := Parse(tt.in)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse(%q) = %v, want a *ConfigError", tt.in, err)
			}
			if ce.Key != tt.key || !strings.Contains(ce.Msg, tt.msg) {
				t.Errorf("Parse(%q) = key %q msg %q, want key %q and %q in the message", tt.in, ce.Key, ce.Msg, tt.key, tt.msg)
			}
		})
	}
}

// TestStringRoundTrip checks that String prints a value Parse reads back.
func TestStringRoundTrip(t *testing.T) {
	for _, in := range []string{"expandable_segments:True,max_split_size_mb:128", "roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.7"} {
		c := mustParse(t, in)
		d := mustParse(t, c.String())
		d.Source = c.Source
		if c != d {
			t.Errorf("Parse(String(%q)) = %+v, want %+v", in, d, c)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "expandable_segments:True", "max_split_size_mb:256,roundup_power2_divisions:[1:4,>:8]",
		"garbage_collection_threshold:0.5", "roundup_power2_divisions:[", ":,[]", "backend:native,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Parse(%q): error %v is not a *ConfigError", s, err)
			}
			return
		}
		if c.MaxSplitSize < 0 || c.MaxNonSplitRounding < 0 || c.LargeSegment < 0 {
			t.Fatalf("Parse(%q) = negative size %+v", s, c)
		}
		for _, d := range c.RoundupDivisions {
			if d < 0 {
				t.Fatalf("Parse(%q): negative divisions", s)
			}
		}
		for _, n := range []int64{1, 600 << 10, 3<<20 + 1, 1 << 40} {
			if r := c.RoundSize(n); r < n {
				t.Fatalf("Parse(%q).RoundSize(%d) = %d", s, n, r)
			}
		}
	})
}
