package objstore

import "testing"

func TestParseURL(t *testing.T) {
	for _, tt := range []struct {
		url, bucket, prefix string
		ok                  bool
	}{
		{"s3://b", "b", "", true},
		{"s3://b/", "b", "", true},
		{"s3://b/p", "b", "p/", true},
		{"s3://b/p/q/", "b", "p/q/", true},
		{"s3:///p", "", "", false},
		{"s3://", "", "", false},
		{"/local/path", "", "", false},
		{"S3://b", "", "", false},
	} {
		bucket, prefix, err := parseURL(tt.url)
		if (err == nil) != tt.ok || bucket != tt.bucket || prefix != tt.prefix {
			t.Errorf("parseURL(%q) = %q, %q, %v; want %q, %q, ok %v", tt.url, bucket, prefix, err, tt.bucket, tt.prefix, tt.ok)
		}
		if IsURL(tt.url) != (tt.url[:min(5, len(tt.url))] == "s3://") {
			t.Errorf("IsURL(%q) = %v", tt.url, IsURL(tt.url))
		}
	}
}

func TestVisible(t *testing.T) {
	for name, want := range map[string]bool{
		"a": true, "a/b.bin": true, "a.b/c": true,
		"": false, "a/": false, ".a": false, "a/.b": false, ".x/y": false, "a//b": false,
	} {
		if got := visible(name); got != want {
			t.Errorf("visible(%q) = %v, want %v", name, got, want)
		}
	}
}
