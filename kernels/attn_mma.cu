/* kernels/attn_mma.cu - what the tensor-core attention's parts share: the speed switches and
 * launch counters (kernels.h), one of each for the whole process, and the start-up that raises
 * every part's shared-memory limits. The passes themselves are kernels/attn_mma.cuh, built in
 * the kernels/attn_mma_d*.cu parts (that header says why the parts). */
#include "kernels/attn_common.cuh"

int attn_fp8_frags_on = 1; /* serve.attn_fp8_frags' default */
extern "C" void k_set_attn_fp8_frags(int on) { attn_fp8_frags_on = on ? 1 : 0; }
int attn_early_lookup_on = 1; /* serve.attn_early_lookup's default */
extern "C" void k_set_attn_early_lookup(int on) { attn_early_lookup_on = on ? 1 : 0; }
int attn_longest_first_on = 1; /* serve.attn_longest_first's default */
extern "C" void k_set_attn_longest_first(int on) { attn_longest_first_on = on ? 1 : 0; }
int attn_stats_together_on = 1; /* serve.attn_stats_together's default */
extern "C" void k_set_attn_stats_together(int on) { attn_stats_together_on = on ? 1 : 0; }

int attn_flash_on = 0; /* serve.attn_flash's default */
extern "C" void k_set_attn_flash(int on) { attn_flash_on = on ? 1 : 0; }
long long attn_flash_launches; /* launches that took attn_flash_kernel */
extern "C" long long k_attn_flash_launches(void) { return attn_flash_launches; }

int attn_strided_tiles_on = 1; /* serve.attn_strided_tiles' default */
extern "C" void k_set_attn_strided_tiles(int on) { attn_strided_tiles_on = on ? 1 : 0; }
int attn_strided_tiles(void) { return attn_strided_tiles_on; }
long long attn_strided_launches; /* launches on the strided tile kernels */
extern "C" long long k_attn_strided_launches(void) { return attn_strided_launches; }

int attn_pair_tiles_on = 2; /* serve.attn_pair_tiles' default: 0 off, 2 the pair form */
extern "C" void k_set_attn_pair_tiles(int form) { attn_pair_tiles_on = form == 2 ? 2 : 0; }
long long attn_pair_launches; /* launches on the pair form */
extern "C" long long k_attn_pair_launches(void) { return attn_pair_launches; }

/* each part's start-up (ATTN_MMA_PART) */
int attn_mma_setup_d256_bf16_keep(void);
int attn_mma_setup_d256_e4m3_keep(void);
int attn_mma_setup_d256_bf16(void);
int attn_mma_setup_d256_e4m3(void);
int attn_mma_setup_d512_bf16(void);
int attn_mma_setup_d512_e4m3(void);

int attn_mma_setup(void) {
    int rc = attn_mma_setup_d256_bf16_keep();
    if (rc == K_OK) rc = attn_mma_setup_d256_e4m3_keep();
    if (rc == K_OK) rc = attn_mma_setup_d256_bf16();
    if (rc == K_OK) rc = attn_mma_setup_d256_e4m3();
    if (rc == K_OK) rc = attn_mma_setup_d512_bf16();
    if (rc == K_OK) rc = attn_mma_setup_d512_e4m3();
    return rc;
}
