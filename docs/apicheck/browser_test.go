package apicheck_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// browser starts headless Chromium (CHROMIUM, default Debian's
// /usr/bin/chromium) for the test. Without it the test skips, except in CI
// (CI set), whose .ci/run installs it: there a missing browser fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Chromium at %s: .ci/run installs Debian's chromium package", bin)
		}
		t.Skipf("no Chromium at %s (apt-get install chromium, or set CHROMIUM)", bin)
	}
	// Puppeteer's defaults, plus what this machine needs: no sandbox as
	// root, and none of Chromium's own network traffic (the network is
	// closed, and refused connections slow it down).
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1600),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// do runs the steps, each batch within 30 s (bounded on a child context:
// a timeout on the browser's own context would stop the browser). On a
// failure the page's screenshot is kept beside the test's artefacts.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, step := range steps {
		if err := chromedp.Do(sctx, step); err != nil {
			if shot, serr := chromedp.Run(ctx, chromedp.FullScreenshot(100)); serr == nil {
				t.Logf("the page: %s", keep(t, "swagger-ui-failure.png", shot))
			}
			t.Fatalf("in the browser, step %d: %v", i+1, err)
		}
	}
}

// keep writes an artefact into ARTIFACTS_DIR (default artifacts/) and
// returns its absolute path.
func keep(t *testing.T, name string, b []byte) string {
	t.Helper()
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = "artifacts"
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path, err := filepath.Abs(filepath.Join(dir, name))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// setValue sets the React-controlled input or select that the JavaScript
// expression el gives, the way a person's typing or choosing does (React
// ignores a plain assignment of .value).
func setValue(el, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const el = %s;
		if (!el) throw new Error("no element " + %q);
		const proto = el instanceof HTMLSelectElement ? HTMLSelectElement.prototype
			: el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
		Object.getOwnPropertyDescriptor(proto, "value").set.call(el, %q);
		el.dispatchEvent(new Event(el instanceof HTMLSelectElement ? "change" : "input", {bubbles: true}));
	})()`, el, el, value))
}

// authSection is the Authorize dialog's form for scheme.
func authSection(scheme string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(".auth-container")].find(e => (e.querySelector("h4")?.textContent || "").trim().startsWith(%q))`, scheme)
}

// authorize opens the Authorize dialog, runs fill on scheme's form,
// presses its Authorize and closes the dialog.
func authorize(scheme string, fill ...chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Click(chromedp.CSS(`.scheme-container button.authorize`)),
		chromedp.WaitVisible(chromedp.CSS(`.dialog-ux .modal-ux`)),
		chromedp.Steps(fill...),
		chromedp.Click(chromedp.JSPath(authSection(scheme)+`.querySelector("button[type=submit]")`)),
		chromedp.WaitVisible(chromedp.JSPath(`[...`+authSection(scheme)+`.querySelectorAll("button")].find(b => b.textContent.trim() === "Logout")`)),
		chromedp.Click(chromedp.CSS(`.dialog-ux button.btn-done`)),
		chromedp.WaitNotPresent(chromedp.CSS(`.dialog-ux .modal-ux`)),
	)
}

// execute expands the operation, presses Try it out, runs fill, presses
// Execute and waits for the answer.
func execute(op string, fill ...chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	sel := "#" + op
	return chromedp.Steps(
		chromedp.Click(chromedp.CSS(sel+` .opblock-summary-control`)),
		chromedp.Click(chromedp.CSS(sel+` button.try-out__btn`)),
		chromedp.WaitVisible(chromedp.CSS(sel+` button.execute`)),
		chromedp.Steps(fill...),
		chromedp.Click(chromedp.CSS(sel+` button.execute`)),
		chromedp.WaitVisible(chromedp.CSS(sel+` .live-responses-table tr.response .response-col_status`)),
	)
}

// answer is the status and body of op's answer, as the UI shows them.
func answer(t *testing.T, ctx context.Context, op string) (status, body string) {
	t.Helper()
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#"+op+` .live-responses-table tr.response .response-col_status`)))
	require.NoError(t, err)
	body, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#"+op+` .live-responses-table tr.response .response-col_description`)))
	require.NoError(t, err)
	return strings.TrimSpace(status), body
}

// clipShot is a PNG of the page from the top of the element from to the
// bottom of the element to: the operation down to its live answer, without
// the documented answers below it.
func clipShot(from, to string) chromedp.Action[[]byte] {
	return func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		box, err := chromedp.Evaluate[[]float64](fmt.Sprintf(`(() => {
			const a = document.querySelector(%q).getBoundingClientRect(), b = document.querySelector(%q).getBoundingClientRect();
			return [a.left + scrollX, a.top + scrollY, a.width, b.bottom - a.top + 16];
		})()`, from, to))(ctx, t)
		if err != nil {
			return nil, err
		}
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			Clip:                  &page.Viewport{X: box[0], Y: box[1], Width: box[2], Height: box[3], Scale: 1},
			CaptureBeyondViewport: ptr(true),
		})
		return r.Data, err
	}
}

var accessToken = regexp.MustCompile(`"access_token":\s*"([^"]+)"`)

// TestSwaggerUIAuthorizeTokenAndPay: in Swagger UI, a merchant authorizes
// with the client credentials (HTTP Basic), gets a token from POST
// /v1/auth/token, authorizes with it (bearer) and creates a payment: 201.
// The screenshot of that answer is kept in ARTIFACTS_DIR (default
// docs/apicheck/artifacts).
func TestSwaggerUIAuthorizeTokenAndPay(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	ctx := browser(t)

	do(t, ctx,
		chromedp.Navigate(g.URL+"/swagger/index.html"),
		chromedp.WaitVisible(chromedp.CSS(`#operations-payments-createPayment`)),
		authorize("ClientBasic",
			chromedp.SendKeys(chromedp.CSS(`input[aria-label="auth-basic-username"]`), m.ClientID),
			chromedp.SendKeys(chromedp.CSS(`input[aria-label="auth-basic-password"]`), m.ClientSecret),
		),
		execute("operations-auth-issueToken",
			setValue(`[...document.querySelectorAll("#operations-auth-issueToken select")].find(s => [...s.options].some(o => o.value === "client_credentials"))`, "client_credentials"),
		),
	)
	status, body := answer(t, ctx, "operations-auth-issueToken")
	require.Equal(t, "200", status, "the token answer: %s", body)
	tok := accessToken.FindStringSubmatch(body)
	require.NotNil(t, tok, "no access_token in %s", body)

	key := uuid.NewString()
	const keyInput = `#operations-payments-createPayment tr[data-param-name="Idempotency-Key"] input`
	do(t, ctx,
		authorize("BearerAuth",
			chromedp.SendKeys(chromedp.JSPath(authSection("BearerAuth")+`.querySelector('input[aria-label="auth-bearer-value"]')`), tok[1]),
		),
		execute("operations-payments-createPayment",
			// The field debounces its changes and flushes them on blur.
			chromedp.Focus(chromedp.CSS(keyInput)),
			setValue(`document.querySelector('`+keyInput+`')`, key),
			chromedp.Blur(chromedp.CSS(keyInput)),
		),
		chromedp.ScrollIntoView(chromedp.CSS(`#operations-payments-createPayment .live-responses-table`)),
	)
	status, body = answer(t, ctx, "operations-payments-createPayment")
	require.Equal(t, "201", status, "the payment answer: %s", body)
	require.Contains(t, body, `"status": "succeeded"`)
	shot, err := chromedp.Run(ctx, clipShot(`#operations-payments-createPayment`, `#operations-payments-createPayment .live-responses-table`))
	require.NoError(t, err)

	t.Logf("screenshot: %s", keep(t, "swagger-ui-create-payment-201.png", shot))

	// The gateway agrees: one payment, under the key the UI sent.
	r := g.Get(m, "/v1/payments")
	require.Equal(t, 200, r.StatusCode)
	data := r.JSON(t)["data"].([]any)
	require.Len(t, data, 1)
	require.Equal(t, key, data[0].(map[string]any)["idempotency_key"])
}
