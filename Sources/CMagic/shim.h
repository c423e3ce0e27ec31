#include <magic.h>
