/* core/token.c — random lease tokens from libsodium's CSPRNG. */
#include <sodium.h>

#include <wakuwaku/token.h>

void wk_token_random(wk_token *token)
{
    if (token)
        randombytes_buf(token->bytes, sizeof(token->bytes));
}
