package secretbox_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/secretbox"
)

func TestSealOpen(t *testing.T) {
	t.Parallel()
	master := bytes.Repeat([]byte{7}, 32)
	b, err := secretbox.New(master, "purpose/a")
	require.NoError(t, err)
	blob := b.Seal([]byte("row-1"), []byte("whsec_secret"))
	got, err := b.Open([]byte("row-1"), blob)
	require.NoError(t, err)
	require.Equal(t, "whsec_secret", string(got))
	_, err = b.Open([]byte("row-2"), blob)
	require.ErrorIs(t, err, secretbox.ErrOpen, "bound to its row")
	other, err := secretbox.New(master, "purpose/b")
	require.NoError(t, err)
	_, err = other.Open([]byte("row-1"), blob)
	require.ErrorIs(t, err, secretbox.ErrOpen, "another purpose's key")
	blob[len(blob)-1] ^= 1
	_, err = b.Open([]byte("row-1"), blob)
	require.ErrorIs(t, err, secretbox.ErrOpen)
	_, err = secretbox.New([]byte("short"), "x")
	require.Error(t, err)
}
