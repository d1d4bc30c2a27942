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

// TestRotation is the life of a MASTER_KEY rotation: blobs sealed under
// the old key open once it is the previous key, Reseal moves them to the
// new one, and after that the old key is not needed.
func TestRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	before, err := secretbox.New(oldKey, "purpose")
	require.NoError(t, err)
	during, err := secretbox.New(newKey, "purpose", oldKey)
	require.NoError(t, err)
	after, err := secretbox.New(newKey, "purpose", nil)
	require.NoError(t, err)
	aad := []byte("row")

	old := before.Seal(aad, []byte("s1"))
	_, err = after.Open(aad, old)
	require.ErrorIs(t, err, secretbox.ErrOpen, "the new key alone does not open the old blob")
	got, err := during.Open(aad, old)
	require.NoError(t, err)
	require.Equal(t, "s1", string(got))

	fresh := during.Seal(aad, []byte("s2"))
	_, err = before.Open(aad, fresh)
	require.ErrorIs(t, err, secretbox.ErrOpen, "sealing uses the current key, never the previous")

	moved, changed, err := during.Reseal(aad, old)
	require.NoError(t, err)
	require.True(t, changed)
	got, err = after.Open(aad, moved)
	require.NoError(t, err)
	require.Equal(t, "s1", string(got))

	same, changed, err := during.Reseal(aad, fresh)
	require.NoError(t, err)
	require.False(t, changed, "already under the current key")
	require.Equal(t, fresh, same)

	_, _, err = during.Reseal([]byte("other row"), old)
	require.ErrorIs(t, err, secretbox.ErrOpen, "still bound to its row")
	_, _, err = after.Reseal(aad, old)
	require.ErrorIs(t, err, secretbox.ErrOpen)

	_, err = secretbox.New(newKey, "purpose", []byte("short"))
	require.Error(t, err)
	_, err = secretbox.New(newKey, "purpose", oldKey, oldKey)
	require.Error(t, err)
}
