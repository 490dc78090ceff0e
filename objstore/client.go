package objstore

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// credentialTimeout bounds the credential lookup at Open: off EC2 the
// instance metadata service may not answer at all, and a mount must not
// hang on it.
const credentialTimeout = 2 * time.Second

// newClient builds an S3 client the way AWS tools do (environment, shared
// config and credentials files, web identity, IMDS), with anonymous
// requests when no credentials are found, region us-east-1 when none is
// configured, path-style addressing for custom endpoints, and no SDK
// retries: Bucket does them. It returns the transport too, so that Close
// can drop its idle connections (and their goroutines).
func newClient(ctx context.Context, url string, log *slog.Logger) (*s3.Client, *http.Transport, error) {
	// The SDK's buildable client, so that LoadDefaultConfig can add a
	// custom CA bundle (AWS_CA_BUNDLE) to it.
	buildable := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) {
			// A server that does not accept, or accepts and never
			// answers, must not hold a read for long: with RetryBudget
			// these bound how long a read of a dead server takes (the
			// body, once it flows, is bounded by getTimeout instead).
			d.Timeout = 3 * time.Second
		}).
		WithTransportOptions(func(tr *http.Transport) {
			tr.ResponseHeaderTimeout = 10 * time.Second
			// Prefetches and readers run many GETs to one host at
			// once; few idle connections would mean constant
			// reconnecting.
			tr.MaxIdleConns = 256
			tr.MaxIdleConnsPerHost = 64
		})
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithHTTPClient(buildable),
		config.WithRetryMaxAttempts(1),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: loading AWS configuration: %w", url, err)
	}
	// Then a plain client on a transport this Bucket owns, so that Close
	// can drop its idle connections and their goroutines.
	var tr *http.Transport
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		tr = bc.GetTransport()
	} else {
		tr = buildable.GetTransport()
	}
	cfg.HTTPClient = &http.Client{
		Transport: tr,
		// As the SDK's own client: S3 redirects are errors to report.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Credentials == nil {
		cfg.Credentials = aws.AnonymousCredentials{}
	} else {
		cctx, cancel := context.WithTimeout(ctx, credentialTimeout)
		_, err := cfg.Credentials.Retrieve(cctx)
		cancel()
		if err != nil {
			log.Info("objstore: no AWS credentials found, reading anonymously", "url", url, "reason", err)
			cfg.Credentials = aws.AnonymousCredentials{}
		}
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// A custom endpoint (MinIO, SeaweedFS, Ceph...) seldom has
		// wildcard DNS for virtual-hosted buckets.
		o.UsePathStyle = o.BaseEndpoint != nil
		o.Retryer = aws.NopRetryer{}
		// Range GETs have no whole-object checksum to validate; the
		// SDK would log that for every one.
		o.DisableLogOutputChecksumValidationSkipped = true
		// Nor should the SDK check a whole-object checksum some server
		// might send with a range: chunk files carry their own digests.
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return client, tr, nil
}
